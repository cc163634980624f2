"""Pure functions: the buffers of a real call -> did the compiler's promises hold?

No JAX here. :mod:`memscope.capturing` records, for the first call of a signature,
integers only: the device addresses of every input leaf before the call, of
every output leaf after it, and whether each input was deleted. Where a donated
input's buffer took no output at the first call (:func:`misses`), it records the
same of the next call: a buffer XLA could not take at the first call (on CPU,
``jax.device_put`` of a NumPy array can share the array's memory) is XLA's own
from then on. This module holds them against the fates read from the compiled
program.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from memscope.report import InputBuffer, Observed, OutputBuffer
from memscope.report.function import NOT_XLAS

#: The device addresses of one leaf, one per addressable shard; ``None`` when it
#: has none to compare (a NumPy array, a Python scalar).
Addresses = tuple[int, ...] | None


@dataclass(frozen=True)
class Observation:
    """One real call's buffers, as integers: nothing here keeps an array alive."""

    inputs_before: tuple[Addresses, ...]
    inputs_deleted: tuple[bool | None, ...]
    outputs_after: tuple[Addresses, ...]
    #: per input: where a ``jax.Ref``'s buffer is after the call (``None``: not a Ref)
    refs_after: tuple[Addresses, ...] = ()
    #: the Refs the function closes over (in the compiled program's order):
    #: their buffers before and after the call; ``None`` where not seen
    closed_before: tuple[Addresses, ...] = ()
    closed_after: tuple[Addresses, ...] = ()
    #: the same Refs' buffers when the run ended, after every call (``None``:
    #: the Ref was gone by then, or not read)
    refs_end: tuple[Addresses, ...] = ()
    closed_end: tuple[Addresses, ...] = ()


def _expects_reuse(b: InputBuffer) -> bool:
    return b.fate == "aliased" or (b.fate == "donor" and b.output is not None)


def _landed(seen: Observation) -> dict[int, list[int]]:
    """Each output address, with the outputs found there."""
    landed: dict[int, list[int]] = {}
    for j, addresses in enumerate(seen.outputs_after):
        for address in addresses or ():
            landed.setdefault(address, []).append(j)
    return landed


def _hits(before: Addresses, landed: dict[int, list[int]]) -> list[int]:
    return sorted({j for a in before or () for j in landed.get(a, [])})


def misses(seen: Observation) -> bool:
    """Did the call delete an input whose buffer no output took, or one whose
    buffer could not be read before the call (still being computed on CPU)?
    Then the next call is observed too (:func:`check_buffers`'s ``again``). From the
    integers alone: the compiled program's fates are not known yet when this is
    asked."""
    landed = _landed(seen)
    return any(deleted and (before is None or not _hits(before, landed))
               for before, deleted in zip(seen.inputs_before, seen.inputs_deleted,
                                          strict=False))


def _lines_up(seen: Observation | None, inputs: Sequence[InputBuffer],
              outputs: Sequence[OutputBuffer]) -> bool:
    return (seen is not None and len(seen.inputs_before) == len(inputs)
            and len(seen.outputs_after) == len(outputs))


def check_buffers(inputs: Sequence[InputBuffer], outputs: Sequence[OutputBuffer],
                  seen: Observation, again: Observation | None = None
                  ) -> tuple[tuple[InputBuffer, ...], tuple[str, ...]]:
    """Every input with ``observed`` and ``deleted`` set, and the findings: each
    place where the call's buffers disagree with the compiled program.

    ``again``: the next call's buffers, where the first call's showed a deleted
    input that no output took (:func:`misses`), or the first call of another
    signature JAX ran with the same executable (NumPy arrays at the first call,
    which have no device buffer to compare). A donated input whose output
    lands in its buffer there, though not at the first call, is
    ``confirmed_later``: no disagreement with the compiled program, which the
    report says apart (:func:`memscope.views.summary.findings`)."""
    if not _lines_up(seen, inputs, outputs):
        return tuple(inputs), ("the call's buffers do not line up with the compiled "
                               "program's leaves; nothing was checked",)
    landed = _landed(seen)
    later: dict[int, list[int]] | None = None
    again_before: tuple[Addresses, ...] = ()
    if again is not None and _lines_up(again, inputs, outputs):
        later, again_before = _landed(again), again.inputs_before
    result, findings = [], []
    for i, b in enumerate(inputs):
        before = seen.inputs_before[i]
        hits = _hits(before, landed)
        if b.ref is not None:
            after = seen.refs_after[i] if i < len(seen.refs_after) else None
            end = seen.refs_end[i] if i < len(seen.refs_end) else None
            ref, found = _ref_check(b, before, after, end)
            result.append(ref)
            findings += found + [f"{b.path} is a Ref, yet {outputs[j].path} landed in its "
                                 "buffer" for j in hits]
            continue
        observed: Observed
        reused_later = (not hits and later is not None and _expects_reuse(b) and b.output in
                        [outputs[j].path for j in _hits(again_before[i], later)])
        if not b.donated or (before is None and not reused_later):
            observed = "n/a"
        elif hits:
            observed = "confirmed"
        elif reused_later:
            observed = "confirmed_later"
        else:
            observed = "not_reused"
        deleted = seen.inputs_deleted[i]
        result.append(replace(b, observed=observed, deleted=deleted))
        findings += _disagreements(b, observed, deleted, [outputs[j].path for j in hits],
                                   checked_again=later is not None)
    return tuple(result), tuple(findings)


def _disagreements(b: InputBuffer, observed: Observed, deleted: bool | None,
                   landed: list[str], *, checked_again: bool = False) -> list[str]:
    found = []
    if observed == "n/a":
        if landed:
            found.append(f"{b.path} was not donated, yet {', '.join(landed)} landed in its "
                         "buffer")
        return found
    if _expects_reuse(b):
        if observed == "not_reused":
            when = ("at the first call nor at the next" if checked_again
                    else "at the first call, the only one checked")
            found.append(f"{b.path}: the compiled program writes {b.output} into its "
                         f"buffer, but {b.output} did not land there {when} ({NOT_XLAS})")
        elif observed == "confirmed" and b.output not in landed:
            found.append(f"{b.path}: the compiled program writes {b.output} into its "
                         f"buffer, but {', '.join(landed)} landed there")
    elif observed == "confirmed":
        found.append(f"{b.path} ({b.fate}): the compiled program reuses nothing of it, yet "
                     f"{', '.join(landed)} landed in its buffer")
    if deleted is not None and deleted != _expects_reuse(b):
        state = "deleted by the call" if deleted else "still alive after the call"
        found.append(f"{b.path} ({b.fate}) was {state}, unlike what the compiled program "
                     "says of its buffer")
    return found


def _ref_check(b: InputBuffer, before: Addresses, after: Addresses, end: Addresses = None
               ) -> tuple[InputBuffer, list[str]]:
    """A Ref JAX keeps must hold its new value in its own buffer after the call:
    ``confirmed`` when its address is unchanged; ``n/a`` when pruned or unread.
    ``end`` (its address when the run ended) sets ``ref_kept``."""
    kept = None if before is None or end is None else end == before
    if b.fate == "pruned" or before is None or after is None:
        return replace(b, observed="n/a", ref_kept=kept), []
    found = [] if kept is not False or before != after else [
        f"{b.path} (a Ref): its buffer was in place through the first call but had "
        "moved when the run ended (replaced outside this function?)"]
    if before == after:
        return replace(b, observed="confirmed", ref_kept=kept), found
    return replace(b, observed="not_reused", ref_kept=kept), [
        f"{b.path} (a Ref, {b.ref}): JAX writes its new value into its own buffer, but "
        "the buffer moved during the call"]


def check_closed(refs: Sequence[InputBuffer], seen: Observation
                         ) -> tuple[tuple[InputBuffer, ...], tuple[str, ...]]:
    """The closed-over Refs with ``observed`` set, and the findings (as for
    Ref arguments: each must keep its buffer through the call). The arrays of
    closed-over hijax values, after the Refs, are not observed."""
    n = sum(b.ref is not None for b in refs)
    if len(seen.closed_after) != n or len(seen.closed_before) != n:
        return tuple(refs), ()
    result, findings = [], []
    ends = seen.closed_end if len(seen.closed_end) == n else (None,) * n
    for b, before, after, end in zip(refs[:n], seen.closed_before, seen.closed_after, ends,
                                     strict=True):
        checked, found = _ref_check(b, before, after, end)
        result.append(checked)
        findings += found
    return (*result, *refs[n:]), tuple(findings)
