"""Which function of one report is which of another: pairing by name, source and signature, and the signature's changes."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from memscope.check.records import (
    split_source,
)
from memscope.report import FunctionReport, InputBuffer


@dataclass(frozen=True)
class Pairing:
    """Current functions with their baseline partner (``None``: none), the
    baseline functions left over, by ``id`` of a current function that has
    baseline signatures but no partner why it could not be paired, and by
    ``id`` of a current function paired with a baseline defined in another
    file how it was paired (``paired by name (train.py -> train_v2.py)``)."""

    pairs: list[tuple[FunctionReport, FunctionReport | None]]
    vanished: list[FunctionReport]
    unpaired: dict[int, str]
    moved: dict[int, str] = field(default_factory=dict)


def match_functions(current: Sequence[FunctionReport], baseline: Sequence[FunctionReport]
                    ) -> tuple[list[tuple[FunctionReport, FunctionReport | None]],
                               list[FunctionReport]]:
    """:func:`pair_functions` without the reasons: (pairs, vanished)."""
    pairing = pair_functions(current, baseline)
    return pairing.pairs, pairing.vanished


def pair_functions(current: Sequence[FunctionReport], baseline: Sequence[FunctionReport]
                   ) -> Pairing:
    """Pair each current function with its baseline.

    First by (name, signature), the source file telling apart what is alike.
    Then what is left, by the function itself: its name and definition file
    (the line moves as code is edited). Then, for a file moved or renamed, by
    name alone: a name that only one file defines among the baseline functions
    left and only one other file among the current ones left is one function.
    In the last two, one signature on each side pairs; of several, each pairs
    with the one it shares the most argument leaves with (same path, then same
    shape and dtype), where that choice is unambiguous. The rest is vanished
    (baseline) or new (current), or, for a current function whose definition
    has baseline signatures left, unpaired with the reason. Pairs come in the
    current order.
    """
    partner, left = _exact_pairs(current, baseline)
    unpaired: dict[int, str] = {}
    groups: dict[tuple[str, str | None], tuple[list[FunctionReport], list[FunctionReport]]]
    groups = defaultdict(lambda: ([], []))
    for fn in current:
        if id(fn) not in partner:
            groups[_identity(fn)][0].append(fn)
    for fn in left:
        groups[_identity(fn)][1].append(fn)
    for (name, _), (now, then) in [*groups.items(), *_moved_groups(groups).items()]:
        if not now or not then:
            continue
        chosen = _pair_by_shared_leaves(now, then)
        for fn in now:
            if id(fn) in chosen:
                partner[id(fn)] = chosen[id(fn)]
            else:
                unpaired[id(fn)] = (
                    f"could not be paired with a baseline signature of {name}: "
                    f"{len(then)} baseline signature{'s' if len(then) != 1 else ''} left "
                    f"for {len(now)} now, none sharing its argument leaves unambiguously "
                    "(--update-baseline takes the new signatures in)")
    matched = {id(p) for p in partner.values()}
    return Pairing([(fn, partner.get(id(fn))) for fn in current],
                   [fn for fn in baseline if id(fn) not in matched], unpaired,
                   _moves(current, partner))


def _moved_groups(groups: dict[tuple[str, str | None],
                               tuple[list[FunctionReport], list[FunctionReport]]]
                  ) -> dict[tuple[str, None], tuple[list[FunctionReport], list[FunctionReport]]]:
    """The functions of ``groups`` (by name and file) left on one side only, joined
    by name where one file defines the name among the current ones and one other
    among the baseline's: a file moved or renamed, not a second function."""
    files: dict[str, tuple[list[str | None], list[str | None]]] = defaultdict(lambda: ([], []))
    for (name, file), (now, then) in groups.items():
        if now and not then:
            files[name][0].append(file)
        elif then and not now:
            files[name][1].append(file)
    moved = {}
    for name, (now_files, then_files) in files.items():
        if len(now_files) == 1 and len(then_files) == 1:
            moved[(name, None)] = (groups[(name, now_files[0])][0],
                                   groups[(name, then_files[0])][1])
    return moved


def _moves(current: Sequence[FunctionReport], partner: dict[int, FunctionReport]
           ) -> dict[int, str]:
    """How each pair defined in two files was paired: ``paired by name (a.py -> b.py)``."""
    moves = {}
    for fn in current:
        then = partner.get(id(fn))
        if then is None:
            continue
        before, now = split_source(then.source)[0], split_source(fn.source)[0]
        if before != now:
            how = "name and signature" if then.signature == fn.signature else "name"
            moves[id(fn)] = f"paired by {how} ({before or 'n/a'} -> {now or 'n/a'})"
    return moves


def _exact_pairs(current: Sequence[FunctionReport], baseline: Sequence[FunctionReport]
                 ) -> tuple[dict[int, FunctionReport], list[FunctionReport]]:
    def key(fn: FunctionReport) -> tuple[str, str]:
        return fn.name, fn.signature

    count_now, count_then = _count(current, key), _count(baseline, key)

    def refined(fn: FunctionReport) -> tuple[object, ...]:
        k = key(fn)
        return ((*k, split_source(fn.source)[0]) if count_now[k] > 1 or count_then[k] > 1
                else k)

    waiting: dict[tuple[object, ...], list[FunctionReport]] = defaultdict(list)
    for fn in baseline:
        waiting[refined(fn)].append(fn)
    partner: dict[int, FunctionReport] = {}
    for fn in current:
        queue = waiting.get(refined(fn))
        if queue:
            partner[id(fn)] = queue.pop(0)
    matched = {id(p) for p in partner.values()}
    return partner, [fn for fn in baseline if id(fn) not in matched]


def _identity(fn: FunctionReport) -> tuple[str, str | None]:
    """A function apart from its signature: its name and the file defining it."""
    return fn.name, split_source(fn.source)[0]


def _pair_by_shared_leaves(now: Sequence[FunctionReport], then: Sequence[FunctionReport]
                           ) -> dict[int, FunctionReport]:
    """Pair signatures of one function by what they share; ambiguous ones stay apart."""
    if len(now) == 1 and len(then) == 1:
        return {id(now[0]): then[0]}

    def shared(a: FunctionReport, b: FunctionReport) -> tuple[int, int]:
        avals = {x.path: (x.shape, x.dtype) for x in b.inputs}
        same_path = [x for x in a.inputs if x.path in avals]
        return (len(same_path),
                sum(1 for x in same_path if avals[x.path] == (x.shape, x.dtype)))

    scores = sorted(((shared(n, t), i, j) for i, n in enumerate(now)
                     for j, t in enumerate(then)), key=lambda s: s[0], reverse=True)
    free_now, free_then = set(range(len(now))), set(range(len(then)))
    chosen: dict[int, FunctionReport] = {}
    for score, i, j in scores:
        if i not in free_now or j not in free_then or score[0] == 0:
            continue
        rivals = [s for s, a, b in scores if s == score and (a, b) != (i, j)
                  and ((a == i and b in free_then) or (b == j and a in free_now))]
        if rivals:
            continue
        chosen[id(now[i])] = then[j]
        free_now.discard(i)
        free_then.discard(j)
    return chosen


def signature_changes(then: FunctionReport, now: FunctionReport) -> tuple[str, ...]:
    """What changed between two signatures of one function, one line per argument
    leaf (``x: float32[32,256] -> float32[512,256]``); empty when none did."""
    if then.signature == now.signature:
        return ()
    before = {b.path: _aval(b) for b in then.inputs}
    after = {b.path: _aval(b) for b in now.inputs}
    lines = [f"{p}: {before[p]} -> {a}" for p, a in after.items()
             if p in before and before[p] != a]
    lines += [f"{p}: new ({a})" for p, a in after.items() if p not in before]
    lines += [f"{p}: gone (was {a})" for p, a in before.items() if p not in after]
    if not lines:  # static arguments or weak types: the signature text says which
        old, new = _signature_parts(then.signature), _signature_parts(now.signature)
        lines = [f"{', '.join(p for p in old if p not in new) or '(none)'} -> "
                 f"{', '.join(p for p in new if p not in old) or '(none)'}"]
    if len(lines) > MAX_SIGNATURE_LINES:
        lines = [*lines[:MAX_SIGNATURE_LINES],
                 f"and {len(lines) - MAX_SIGNATURE_LINES} more"]
    return tuple(lines)


#: Lines of a signature change listed before "and N more".
MAX_SIGNATURE_LINES = 5


def _aval(b: InputBuffer) -> str:
    return f"{b.dtype}[{','.join(map(str, b.shape))}]"


def _signature_parts(signature: str) -> list[str]:
    """``(float32[4,8], #1=3)`` -> its top-level parts (commas inside brackets kept)."""
    parts, depth, current = [], 0, ""
    for ch in signature.strip()[1:-1]:
        depth += 1 if ch in "[(" else -1 if ch in "])" else 0
        if ch == "," and depth == 0:
            parts.append(current.strip())
            current = ""
        else:
            current += ch
    if current.strip():
        parts.append(current.strip())
    return parts


def _count(fns: Sequence[FunctionReport], key: Callable[[FunctionReport], tuple[str, str]]
           ) -> dict[tuple[str, str], int]:
    counts: dict[tuple[str, str], int] = defaultdict(int)
    for fn in fns:
        counts[key(fn)] += 1
    return counts
