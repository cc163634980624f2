"""Why a peak moved: the buffers live at two peaks paired, and what appeared,
grew, shrank or went (pure functions on two reports' :class:`LiveAtPeak`).

The buffers are paired by their parts (:attr:`LiveAtPeak.parts`): role,
where (the source line that defines them, or an argument leaf's path) and op.
A source path is compared by what stays the same across machines and
environments: below ``site-packages/`` for an installed package, else as the
report shows it (relative to the run's directory where it was under it), so
two reports made on two environments pair. Every buffer is in one part, so the
changes add up to the change in the live bytes at the peak, to the byte.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from memscope.report import ROLE_WORDS, LiveAtPeak, PeakPart
from memscope.report.units import format_bytes_apart, format_change
from memscope.views.roles_text import package_path, part_where, shape_text

ChangeKind = Literal["appeared", "grew", "shrank", "went"]
#: Changes named where a line names the largest.
NAMED = 3


@dataclass(frozen=True)
class PartChange:
    """One part of the peak before and after (0 bytes: absent)."""

    role: str
    where: str | None
    op: str
    before: int
    after: int
    buffers_before: int
    buffers_after: int
    shape: str = ""

    @property
    def change(self) -> int:
        return self.after - self.before

    @property
    def kind(self) -> ChangeKind:
        if not self.before:
            return "appeared"
        if not self.after:
            return "went"
        return "grew" if self.after > self.before else "shrank"

    def text(self) -> str:
        """``-7.5 MiB activations: model.py:7 dot_general went (15 buffers, largest
        f32[512,256])``."""
        where = part_where(self.where, self.op)
        if self.op == "argument":
            what = f"{where} (argument)"
        elif self.where is None:
            what = f"{self.op} (no source line)"
        else:
            what = f"{where} {self.op}"
        buffers = max(self.buffers_before, self.buffers_after)
        shape = f"largest {shape_text(self.shape)}" if buffers > 1 else shape_text(self.shape)
        if self.kind in ("appeared", "went"):
            how = f"{self.kind} ({buffers} buffer{'s' if buffers != 1 else ''}, {shape})"
        else:
            # apart: a change of a few bytes never reads as 1.9 MiB -> 1.9 MiB
            then, now = format_bytes_apart([self.before, self.after])
            how = (f"{self.kind} {then} -> {now} "
                   f"({self.buffers_before} -> {self.buffers_after} buffers, {shape})"
                   if self.buffers_before != self.buffers_after else
                   f"{self.kind} {then} -> {now} ({shape})")
        role = ROLE_WORDS.get(self.role, self.role)
        if self.role == "unknown":
            role = "role cannot be told"
        return f"{format_change(self.change)} {role}: {what} {how}"


def _key(part: PeakPart | PartChange) -> tuple[str, str | None, str]:
    return part.role, package_path(part.where), part.op


def peak_changes(then: LiveAtPeak | None, now: LiveAtPeak | None
                 ) -> tuple[PartChange, ...] | None:
    """The parts that differ between two peaks, largest change first; they add
    up to ``now.bytes - then.bytes``. ``None`` where either report has no
    parts (made before roles, or no peak read)."""
    if then is None or now is None or (not then.parts and then.bytes) \
            or (not now.parts and now.bytes):
        return None
    before, after = _grouped(then.parts), _grouped(now.parts)
    changes = []
    for key in {**before, **after}:
        old, new = before.get(key, []), after.get(key, [])
        named = (new or old)[0]  # named as the newer report names it
        change = PartChange(named.role, named.where, named.op, sum(p.bytes for p in old),
                            sum(p.bytes for p in new), sum(p.buffers for p in old),
                            sum(p.buffers for p in new), named.shape)
        if change.change:
            changes.append(change)
    return tuple(sorted(_same_buffer_unnamed(changes),
                        key=lambda c: (-abs(c.change), str(_key(c)))))


def _same_buffer_unnamed(changes: list[PartChange]) -> list[PartChange]:
    """``changes`` less the pairs that are one buffer whose source line one
    report has and the other not (XLA dropped or gained its metadata between
    two releases): a part that went at a line and one that appeared with no
    line, of the same role, op, shape and bytes, are no change."""
    def twin(c: PartChange) -> tuple[str, str, str, int]:
        return c.role, c.op, c.shape, abs(c.change)

    went: dict[tuple[str, str, str, int], list[PartChange]] = {}
    for c in changes:
        if c.kind == "went":
            went.setdefault(twin(c), []).append(c)
    dropped: set[int] = set()
    for c in changes:
        if c.kind != "appeared":
            continue
        for other in went.get(twin(c), []):
            if id(other) not in dropped and (c.where is None) != (other.where is None):
                dropped.update((id(c), id(other)))
                break
    return [c for c in changes if id(c) not in dropped]


def _grouped(parts: Sequence[PeakPart]) -> dict[tuple[str, str | None, str], list[PeakPart]]:
    found: dict[tuple[str, str | None, str], list[PeakPart]] = {}
    for p in parts:
        found.setdefault(_key(p), []).append(p)
    return found


def explained(changes: Sequence[PartChange], count: int = NAMED) -> str:
    """The largest ``count`` changes in one line, the rest summed."""
    shown = list(changes[:count])
    rest = changes[count:]
    text = "; ".join(c.text() for c in shown)
    if rest:
        text += (f"; and {len(rest)} more ({format_change(sum(c.change for c in rest))})")
    return text


def grown(changes: Sequence[PartChange], count: int = NAMED) -> str:
    """The largest ``count`` parts that grew or appeared, in one line."""
    up = [c for c in changes if c.change > 0]
    return explained(up, count) if up else ""
