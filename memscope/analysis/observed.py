"""Pure functions: the buffers of a real call -> did the compiler's promises hold?

No JAX here. :mod:`memscope.capturing` records, for the first call of a signature,
integers only: the device addresses of every input leaf before the call, of
every output leaf after it, and whether each input was deleted. This module
holds them against the fates read from the compiled program.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from memscope.report import InputBuffer, Observed, OutputBuffer

#: The device addresses of one leaf, one per addressable shard; ``None`` when it
#: has none to compare (a NumPy array, a Python scalar).
Addresses = tuple[int, ...] | None


@dataclass(frozen=True)
class Observation:
    """One real call's buffers, as integers: nothing here keeps an array alive."""

    inputs_before: tuple[Addresses, ...]
    inputs_deleted: tuple[bool | None, ...]
    outputs_after: tuple[Addresses, ...]


def _expects_reuse(b: InputBuffer) -> bool:
    return b.fate == "aliased" or (b.fate == "donor" and b.output is not None)


def check(inputs: Sequence[InputBuffer], outputs: Sequence[OutputBuffer],
          seen: Observation) -> tuple[tuple[InputBuffer, ...], tuple[str, ...]]:
    """Every input with ``observed`` and ``deleted`` set, and the findings: each
    place where the call's buffers disagree with the compiled program."""
    if (len(seen.inputs_before) != len(inputs) or len(seen.outputs_after) != len(outputs)):
        return tuple(inputs), ("the call's buffers do not line up with the compiled "
                               "program's leaves; nothing was checked",)
    landed: dict[int, list[int]] = {}
    for j, addresses in enumerate(seen.outputs_after):
        for address in addresses or ():
            landed.setdefault(address, []).append(j)
    result, findings = [], []
    for i, b in enumerate(inputs):
        before = seen.inputs_before[i]
        hits = sorted({j for a in before or () for j in landed.get(a, [])})
        observed: Observed
        if not b.donated or before is None:
            observed = "n/a"
        else:
            observed = "confirmed" if hits else "not_reused"
        deleted = seen.inputs_deleted[i]
        result.append(replace(b, observed=observed, deleted=deleted))
        findings += _disagreements(b, observed, deleted, [outputs[j].path for j in hits])
    return tuple(result), tuple(findings)


def _disagreements(b: InputBuffer, observed: Observed, deleted: bool | None,
                   landed: list[str]) -> list[str]:
    found = []
    if observed == "n/a":
        if landed:
            found.append(f"{b.path} was not donated, yet {', '.join(landed)} landed in its "
                         "buffer")
        return found
    if _expects_reuse(b):
        if observed == "not_reused":
            found.append(f"{b.path}: the compiled program writes {b.output} into its "
                         f"buffer, but {b.output} did not land there")
        elif b.output not in landed:
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
