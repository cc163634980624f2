"""What a peak is made of, in words: the first screen's line per function and
the section of each role's largest buffers (:mod:`memscope.analysis.roles`
decides the roles; docs/roles.md says how)."""

from __future__ import annotations

from memscope.report.memory import ROLE_WORDS, LiveAtPeak, Memory, PeakPart
from memscope.report.units import format_bytes

#: A peak below this, or below a quarter of the run's largest, is not worth a
#: line on the first screen (its section and the JSON report still have it).
WORTH_READING = 64 * 1024
WORTH_READING_SHARE = 0.25
#: Roles named in the first screen's line; the rest are summed ("unknown" is
#: always named: what memscope cannot tell is never hidden).
LINE_ROLES = 3
#: A role's largest parts named in its section.
PARTS_PER_ROLE = 3


def percent(part: int, whole: int) -> str:
    """``52%``; ``<1%`` for a part too small to show as a whole percent."""
    if whole <= 0:
        return "n/a"
    share = 100 * part / whole
    return "<1%" if 0 < share < 0.5 else f"{share:.0f}%"


def roles_line(live: LiveAtPeak | None, largest: int = 0, memory: Memory | None = None
               ) -> str | None:
    """``peak made of: activations 52%, optimizer state 31%, parameters 15%, 4
    more 2%``; ``None`` without roles or for a peak not worth reading (under
    :data:`WORTH_READING`, or a quarter of the run's ``largest``)."""
    if live is None or not live.roles or live.bytes < max(WORTH_READING,
                                                          WORTH_READING_SHARE * largest):
        return None
    return made_of(live, memory)


def made_of(live: LiveAtPeak, memory: Memory | None = None, *, sized: bool = False) -> str:
    """:func:`roles_line`'s words for any peak with roles; ``sized`` gives each
    share its bytes too (``activations 8.0 MiB (52%)``), as a failed limit says
    it (:func:`memscope.check.judge.what_holds_the_peak`)."""

    def share(part: int) -> str:
        return (f"{format_bytes(part)} ({percent(part, live.bytes)})" if sized
                else percent(part, live.bytes))

    # Largest first, and no role named before a larger one left in "N more":
    # "cannot be told", always said, is said within the group it falls in.
    named, rest = live.roles[:LINE_ROLES], live.roles[LINE_ROLES:]
    words = [f"{ROLE_WORDS[r.role]} {share(r.bytes)}" for r in named]
    if rest:
        unknown = [r for r in rest if r.role == "unknown"]
        among = (f" ({ROLE_WORDS['unknown']} {share(unknown[0].bytes)} of it)"
                 if unknown and len(rest) > 1 else "")
        words.append(f"{ROLE_WORDS[rest[0].role]} {share(rest[0].bytes)}"
                     if len(rest) == 1 else
                     f"{len(rest)} more {share(sum(r.bytes for r in rest))}" + among)
    return lead(live, memory) + ", ".join(words) + constants_note(live, memory)


#: What the executable's constants are, as the first screen says it.
CONSTANTS = "the arrays the function closes over and its literals, held for the call"


def _constants(live: LiveAtPeak) -> int:
    return sum(r.bytes for r in live.roles if r.role == "constants")


def _leaves_out_constants(live: LiveAtPeak, memory: Memory | None) -> bool:
    """The peak (argument + output - alias + temp) leaves out the constants
    live at the busiest step, which then exceeds it."""
    return (memory is not None and memory.peak_rule == "sum" and memory.peak_bytes is not None
            and live.bytes > memory.peak_bytes and _constants(live) > 0)


def lead(live: LiveAtPeak, memory: Memory | None) -> str:
    """``peak made of: ``, saying of what the shares are where they are not of
    the peak printed beside them (``memory.peak_bytes``): the bytes live at the
    schedule's busiest step, and why that differs from the peak. Within half a
    percent no share would read otherwise, and it is not said."""
    peak = memory.peak_bytes if memory is not None else None
    if peak is None or abs(peak - live.bytes) * 200 < peak:
        return "peak made of: "
    shares = f"shares of the {format_bytes(live.bytes)} live at its busiest step"
    diff = format_bytes(abs(peak - live.bytes))
    if live.bytes < peak:
        why = ("allocated for the call but holds no buffer live then"
               if memory is not None and memory.peak_rule in ("sum", "hbm")
               else "in XLA's own figure only")
        return f"peak made of ({shares}; the peak's other {diff} is {why}): "
    if _leaves_out_constants(live, memory):
        return (f"peak made of ({shares}, with {format_bytes(_constants(live))} of constants "
                f"the peak leaves out: {CONSTANTS}): ")
    return f"peak made of ({shares}, {diff} above the peak by the schedule's count): "


def constants_note(live: LiveAtPeak, memory: Memory | None = None) -> str:
    """``; constants: the arrays the function closes over ...`` where the
    executable's constants are a tenth of the bytes live or more (a closed-over
    dataset) and :func:`lead` did not say it, else ``""``."""
    if (not live.bytes or _constants(live) * 10 < live.bytes
            or _leaves_out_constants(live, memory)):
        return ""
    return f"; constants: {CONSTANTS}"


def package_path(where: str | None) -> str | None:
    """A source path below ``site-packages/`` from there on
    (``optax/_src/update.py:42``), as it reads the same on every machine and
    environment; any other as the report shows it."""
    if where is None:
        return None
    _, found, below = where.rpartition("site-packages/")
    return below if found else where


def part_where(where: str | None, op: str) -> str:
    """Where a part of a peak is, as every view names it: an argument leaf's
    path, or the defining source line from the package on."""
    if op == "argument":
        return where or "an argument"
    return package_path(where) or "no source line"


def part_text(part: PeakPart) -> str:
    """``sample.py:7 dot_general (3 buffers, f32[128,512])``, or for an
    argument leaf its path."""
    if part.op == "argument":
        return f"{part_where(part.where, part.op)} (argument)"
    count = f"{part.buffers} buffers, largest " if part.buffers > 1 else ""
    return f"{part_where(part.where, part.op)} {part.op} ({count}{shape_text(part.shape)})"


def shape_text(shape: str) -> str:
    """``f32[128,64]``; a tuple's index table as ``a tuple of 15``."""
    if not shape.startswith("("):
        return shape
    depth, elements = 0, 1
    for c in shape[1:-1]:
        depth += c in "([{"
        depth -= c in ")]}"
        elements += c == "," and depth == 0
    return f"a tuple of {elements}" if shape != "()" else "an empty tuple"


def role_lines(live: LiveAtPeak, parts: int = PARTS_PER_ROLE) -> list[str]:
    """Per role, largest first: its bytes and share, then its largest parts."""
    lines = []
    for r in live.roles:
        noun = "buffer" if r.buffers == 1 else "buffers"
        lines.append(f"{ROLE_WORDS[r.role]}: {format_bytes(r.bytes)} "
                     f"({percent(r.bytes, live.bytes)}, {r.buffers} {noun})")
        own = live.parts_of(r.role)
        for p in own[:parts]:
            lines.append(f"    {format_bytes(p.bytes):>10}  {part_text(p)}")
        if len(own) > parts:
            more = own[parts:]
            lines.append(f"    and {len(more)} more: {format_bytes(sum(p.bytes for p in more))}")
    return lines
