"""Leaves the way users think of them (their paths and bounded lists: :mod:`memscope.report.paths`): groups by argument and subtree, reasons merged with a count, and each argument's abbreviated signature. Pure, no JAX."""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from memscope.report import (
    FunctionReport,
    InputBuffer,
    OutputBuffer,
)
from memscope.report.paths import (
    MAX_LEAVES_LISTED,
    argument_of,
    bounded,
    path_matches,
    path_steps,
)
from memscope.report.units import format_bytes

#: An argument or subtree with more leaves than this is shown by its parts.
SUBTREE_MIN = 8
#: How many subtrees of one argument get a line of their own.
MAX_SUBTREES = 8
#: An argument with at most this many leaves is spelled out in the signature.
MAX_SPELLED = 3


# --- records -------------------------------------------------------------------------


@dataclass(frozen=True)
class LeafFilter:
    """Which leaves ``--leaves`` lists: those under or matching ``pattern``, with
    ``fate`` (see :func:`select_leaves`)."""

    pattern: str | None = None
    fate: str | None = None


@dataclass(frozen=True)
class FateCount:
    """How many leaves of a group have one fate (``candidates``: of those, not donated
    but reusable by an output)."""

    fate: str
    leaves: int
    bytes: int
    candidates: int = 0


@dataclass(frozen=True)
class LeafGroup:
    """An argument (``depth`` 0) or one of its subtrees (``depth`` 1), with its leaves' fates."""

    path: str
    depth: int
    leaves: int
    bytes: int
    fates: tuple[FateCount, ...]
    #: run-time observations (``confirmed, deleted``) and how many leaves had each
    observed: tuple[tuple[str, int], ...] = ()


@dataclass(frozen=True)
class ReasonGroup:
    """Leaves of one group whose reasons say the same thing, with one of them as example."""

    group: str
    fate: str
    leaves: int
    bytes: int
    example_path: str
    example: str


@dataclass(frozen=True)
class ArgumentSignature:
    """One argument of a signature, abbreviated: ``params: 134 arrays, 6.6 MiB``."""

    name: str
    text: str
    #: a static argument (``lr=0.1``), part of the signature by value
    static: bool = False


# --- groups --------------------------------------------------------------------------

Buffer = InputBuffer | OutputBuffer


def fate_label(b: Buffer) -> str:
    """The fate a reader sees: a ``jax.Ref``'s by what the program does with it
    (``ref_updated``, ``ref_read``, ``ref_written``, ``ref_unused``), else ``fate``."""
    if isinstance(b, InputBuffer) and b.ref is not None:
        return f"ref_{b.ref}"
    return b.fate


def _observed_label(b: Buffer) -> str | None:
    if not isinstance(b, InputBuffer) or b.observed in (None, "n/a"):
        return None
    if b.ref is not None:  # a Ref is never deleted: its buffer stays or moves
        first = "same_buffer" if b.observed == "confirmed" else "moved"
        later = {True: ", kept", False: ", moved_later", None: ""}[b.ref_kept]
        return f"{first}{later}"
    state = "" if b.deleted is None else (", deleted" if b.deleted else ", alive")
    return f"{b.observed}{state}"


def observed_label(b: Buffer) -> str:
    """What the first call showed of ``b``, as the leaf tables say it (empty: nothing)."""
    return _observed_label(b) or ""


def _make_group(path: str, depth: int, leaves: Sequence[Buffer], candidate: set[str]
                ) -> LeafGroup:
    fates: dict[str, list[Buffer]] = {}
    for b in leaves:
        fates.setdefault(fate_label(b), []).append(b)
    observed: dict[str, int] = {}
    for b in leaves:
        label = _observed_label(b)
        if label is not None:
            observed[label] = observed.get(label, 0) + 1
    return LeafGroup(
        path, depth, len(leaves), sum(b.bytes for b in leaves),
        tuple(FateCount(f, len(bs), sum(b.bytes for b in bs),
                        sum(b.path in candidate for b in bs)) for f, bs in fates.items()),
        tuple(observed.items()))


def _children(prefix_len: int, leaves: Sequence[Buffer]) -> dict[str, list[Buffer]]:
    """Leaves by their subtree one step below ``prefix_len`` steps, descending through
    single-child chains (``opt_state`` -> ``opt_state[0]`` -> ``.mu``, ``.nu``)."""
    depth = prefix_len
    while True:
        parts: dict[str, list[Buffer]] = {}
        for b in leaves:
            steps = path_steps(b.path)
            parts.setdefault("".join(steps[:depth + 1]), []).append(b)
        deeper = all(len(path_steps(b.path)) > depth + 1 for b in leaves)
        if len(parts) == 1 and deeper:
            depth += 1
            continue
        return parts


def leaf_groups(buffers: Sequence[Buffer], candidate: Iterable[str] = ()) -> tuple[LeafGroup, ...]:
    """One group per top-level argument, in order, each large one followed by its subtrees."""
    chosen = set(candidate)
    by_arg: dict[str, list[Buffer]] = {}
    for b in buffers:
        by_arg.setdefault(argument_of(b.path), []).append(b)
    groups = []
    for arg, leaves in by_arg.items():
        groups.append(_make_group(arg, 0, leaves, chosen))
        if len(leaves) <= SUBTREE_MIN:
            continue
        parts = _children(1, leaves)
        if len(parts) < 2:
            continue
        shown = list(parts.items())[:MAX_SUBTREES]
        groups += [_make_group(p, 1, ls, chosen) for p, ls in shown]
        rest = [b for _, ls in list(parts.items())[MAX_SUBTREES:] for b in ls]
        if rest:
            groups.append(_make_group(f"{len(parts) - MAX_SUBTREES} more subtrees of {arg}",
                                      1, rest, chosen))
    return tuple(groups)


# --- reasons -------------------------------------------------------------------------


def leaf_reason(b: InputBuffer) -> str | None:
    """Why a leaf ended as it did, in words: its own reason, or the generic one its
    fate implies; ``None`` when there is nothing to explain."""
    if b.reason is not None:
        return b.reason
    if b.fate == "unusable" and not b.in_warning:
        return ("Donated but no output could take its buffer (JAX did not warn in this run: "
                "the function was lowered before).")
    if b.fate == "donor":
        used = (f"XLA reused it for {b.output}." if b.output else
                "XLA did not use it, so it stays allocated.")
        return ("Offered to XLA as an optional donor (no output of its shape and dtype was "
                f"left); {used}")
    return None


def _template(b: InputBuffer, text: str, partner: str | None) -> str:
    # Reasons name the leaf, its partner and its size: what differs from leaf to leaf
    # while the reason is the same.
    text = text.replace(b.path, "\0")
    if partner:
        text = text.replace(partner, "\1")
    return text.replace(format_bytes(b.bytes), "\2")


def reason_groups(fn: FunctionReport) -> tuple[ReasonGroup, ...]:
    """Each argument's leaves with the same reason, merged, in the order they first appear."""
    merged: dict[tuple[str, str, str], list[tuple[InputBuffer, str]]] = {}
    for b in fn.inputs:
        text = leaf_reason(b)
        if text is None:
            continue
        key = (argument_of(b.path), b.fate, _template(b, text, b.output or b.candidate_for))
        merged.setdefault(key, []).append((b, text))
    groups = []
    for (_arg, fate, _), items in merged.items():
        paths = [b.path for b, _ in items]
        # the largest leaf is the example: its saving is the one worth reading
        example, text = max(items, key=lambda item: item[0].bytes)
        groups.append(ReasonGroup(common_prefix(paths), fate, len(items),
                                  sum(b.bytes for b, _ in items), example.path, text))
    return tuple(groups)


def common_prefix(paths: Sequence[str]) -> str:
    """The deepest subtree holding every path (the path itself for one leaf)."""
    split = [path_steps(p) for p in paths]
    common: list[str] = []
    for steps in zip(*split, strict=False):
        if any(s != steps[0] for s in steps):
            break
        common.append(steps[0])
    return "".join(common)


# --- signatures ----------------------------------------------------------------------


def _aval(b: Buffer) -> str:
    aval = f"{b.dtype}[{','.join(map(str, b.shape))}]"
    return f"Ref{{{aval}}}" if isinstance(b, InputBuffer) and b.ref is not None else aval


def argument_signatures(fn: FunctionReport) -> tuple[ArgumentSignature, ...]:
    """Each argument abbreviated: its aval, a few spelled out, or a count and a size;
    then the static arguments the signature names (``lr=0.1``)."""
    by_arg: dict[str, list[InputBuffer]] = {}
    for b in fn.inputs:
        by_arg.setdefault(argument_of(b.path), []).append(b)
    out = []
    for arg, leaves in by_arg.items():
        if len(leaves) == 1 and leaves[0].path == arg:
            text = _aval(leaves[0])
        elif len(leaves) <= MAX_SPELLED:
            inner = ", ".join(f"{_relative(b.path, arg)}: {_aval(b)}" for b in leaves)
            text = "{" + inner + "}"
        else:
            noun = "Refs" if all(b.ref is not None for b in leaves) else "arrays"
            text = f"{len(leaves)} {noun}, {format_bytes(sum(b.bytes for b in leaves))}"
        out.append(ArgumentSignature(arg, text))
    out += [ArgumentSignature(name, value, static=True)
            for name, value in static_arguments(fn.signature)]
    return tuple(out)


def _relative(path: str, arg: str) -> str:
    rest = path[len(arg):]
    m = re.fullmatch(r"\[(['\"])(.*)\1\]", rest) or re.fullmatch(r"\.(\w+)", rest)
    return m.group(m.lastindex or 0) if m else rest


def static_arguments(signature: str) -> list[tuple[str, str]]:
    """The static arguments in a signature's text: ``(f32[2], #1=3, lr=0.1)`` ->
    ``[("#1", "3"), ("lr", "0.1")]``."""
    inner = signature[1:-1] if signature.startswith("(") and signature.endswith(")") else ""
    parts, depth, start, quote = [], 0, 0, ""
    for i, ch in enumerate(inner):
        if quote:
            quote = "" if ch == quote and inner[i - 1] != "\\" else quote
        elif ch in "'\"":
            quote = ch
        elif ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
        elif ch == "," and depth == 0:
            parts.append(inner[start:i].strip())
            start = i + 1
    parts.append(inner[start:].strip())
    found = []
    for part in parts:
        m = re.match(r"(#\d+|[A-Za-z_]\w*)=(.*)", part, re.S)
        if m:
            found.append((m.group(1), m.group(2)))
    return found


def arguments_text(arguments: Sequence[ArgumentSignature]) -> str:
    """``params: 134 arrays, 6.6 MiB; batch: {tokens: int32[8,64]}``; ``()`` for none."""
    return "; ".join(f"{a.name}={a.text}" if a.static else f"{a.name}: {a.text}"
                     for a in arguments) or "()"


def short_signature(fn: FunctionReport) -> str:
    """The abbreviated signature of ``fn`` (the full one is ``fn.signature``)."""
    if not fn.inputs:
        return fn.signature if len(fn.signature) <= 80 else f"{fn.signature[:77]}..."
    return arguments_text(argument_signatures(fn))


def parenthesized(signature: str) -> str:
    """A signature in parentheses, as a name is followed by it: a recorded ``(...)``
    signature brings its own."""
    return signature if signature.startswith("(") else f"({signature})"


def differs_text(fn: FunctionReport, others: Sequence[FunctionReport]) -> str | None:
    """What sets ``fn`` apart from the other signatures of the same function: the
    leaves whose dtype and shape differ (a bounded list), and static arguments."""
    if not others:
        return None
    mine = {b.path: _aval(b) for b in fn.inputs}
    theirs = [{b.path: _aval(b) for b in o.inputs} for o in others]
    changed = [f"{p} {a}" for p, a in mine.items() if any(t.get(p) != a for t in theirs)]
    changed += [f"no {p}" for p in dict.fromkeys(p for t in theirs for p in t)
                if p not in mine]
    statics = dict(static_arguments(fn.signature))
    for o in others:
        for name, value in static_arguments(o.signature):
            if statics.get(name) != value and name in statics:
                changed.append(f"{name}={statics[name]}")
    changed = list(dict.fromkeys(changed))
    if not changed:
        return "the same leaves (it differs in weak types or shardings)"
    return bounded(changed)


def _leaf_paths(fn: FunctionReport) -> list[str]:
    """Every leaf path :func:`select_leaves` chooses from, in its order."""
    return [*(b.path for b in (*fn.inputs, *fn.closed_over_refs)),
            *(o.path for o in fn.outputs)]


def unmatched_pattern(functions: Sequence[FunctionReport], pattern: str) -> str | None:
    """What to say when ``--path pattern`` selects no leaf of any of ``functions``
    (``--path '[' matches no leaf of any function; leaf paths look like ...``), with
    ``'*pattern*'`` offered when that would match; ``None`` when some leaf matches."""
    paths = [path for fn in functions for path in _leaf_paths(fn)]
    if any(path_matches(path, pattern) for path in paths):
        return None
    said = f"--path {pattern!r} matches no leaf of any function"
    if not paths:
        return f"{said} (the report has no leaves)"
    # A name typed alone (`bias`, `['w']`) is most often meant inside the paths.
    wider = f"*{pattern}*"
    found = sum(path_matches(path, wider) for path in paths) if (
        re.search(r"\w", pattern) and not any(ch in pattern for ch in "*?")) else 0
    if found:
        return (f"{said}; did you mean {wider!r} ({found} "
                f"{'leaf' if found == 1 else 'leaves'})? A pattern without * or ? "
                "selects a whole path and what is under it")
    # The first path of each argument (or result) shows how paths are written.
    examples: dict[str, str] = {}
    for path in paths:
        examples.setdefault(argument_of(path), path)
    return (f"{said}; leaf paths look like "
            f"{bounded(list(examples.values()), MAX_LEAVES_LISTED)} (a path and what is under "
            "it, or a glob: *, ?; brackets are literal)")


def select_leaves(fn: FunctionReport, pattern: str | None = None,
                  fate: str | None = None) -> tuple[tuple[InputBuffer, ...],
                                                     tuple[OutputBuffer, ...]]:
    """The leaves of ``fn`` under (or matching) ``pattern`` with ``fate`` (``candidate``
    selects the candidates); ``None`` selects all."""
    def keep(b: Buffer) -> bool:
        if pattern is not None and not path_matches(b.path, pattern):
            return False
        if fate is None:
            return True
        if fate == "candidate":
            return isinstance(b, InputBuffer) and b.candidate
        return fate in (b.fate, fate_label(b))
    return (tuple(b for b in (*fn.inputs, *fn.closed_over_refs) if keep(b)),
            tuple(o for o in fn.outputs if keep(o)))
