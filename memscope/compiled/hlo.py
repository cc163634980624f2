"""What a compiled (optimized) HLO module says about its buffers.

Reads the serialized ``HloModuleProto`` of the executable JAX runs: the
input/output alias map XLA settled on (fixed aliases, and optional donors XLA
chose to use), the donors it left unused, and which results are plain copies of
a parameter. Indices are those of the lowered ``main`` function: argument ``i``
is HLO parameter ``i`` (or tuple element ``i`` when JAX passed arguments as one
tuple), result ``j`` is element ``j`` of the root tuple.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from memscope.compiled._hlo_schema import HloModuleProto

# XLA's alias kinds (hlo.proto, enum Kind).
_MUST_ALIAS = 2


@dataclass(frozen=True)
class Alias:
    """Result ``output`` is written into the buffer of argument ``argument``."""

    argument: int
    output: int
    must_alias: bool


@dataclass(frozen=True)
class HloFacts:
    """The buffer facts of one compiled module, by ``main`` argument/result index."""

    module_name: str
    aliases: tuple[Alias, ...]
    unused_donors: tuple[int, ...]
    #: per result, the argument it is a plain copy of (or is), else None
    result_sources: tuple[int | None, ...]


class HloDecodeError(ValueError):
    """The serialized module does not have the structure memscope expects."""


def parse_module(serialized: bytes) -> Any:
    """The ``HloModuleProto`` message of ``serialized``, decoded once to be read
    by :func:`read_module` and :func:`memscope.compiled.buffers.read_buffer_assignment`."""
    module = HloModuleProto()
    module.ParseFromString(serialized)
    return module


def read_module(serialized: bytes | Any, *, tuple_args: bool = False) -> HloFacts:
    """Decode one ``HloModuleProto`` (serialized, or from :func:`parse_module`)
    into :class:`HloFacts`.

    Raises:
        HloDecodeError: the bytes are not a module with an entry computation.
    """
    module = parse_module(serialized) if isinstance(serialized, bytes) else serialized
    entry = _entry_computation(module)
    by_id = {instr.id: instr for instr in entry.instructions}
    root = by_id.get(entry.root_id)
    if root is None:
        raise HloDecodeError(f"module {module.name!r} has no root instruction")
    root_is_tuple = root.opcode == "tuple"
    elements = list(root.operand_ids) if root_is_tuple else [root.id]

    def argument(number: int, index: Sequence[int]) -> int:
        return int(index[0]) if tuple_args and index else int(number)

    def result(index: Sequence[int]) -> int:
        return int(index[0]) if root_is_tuple and index else 0

    aliases = tuple(
        Alias(argument=argument(e.parameter_number, e.parameter_shape_index),
              output=result(e.output_shape_index),
              must_alias=e.kind == _MUST_ALIAS)
        for e in module.input_output_alias.entries
    )
    donors = tuple(argument(e.parameter_number, e.parameter_shape_index)
                   for e in module.buffer_donor.entries)
    computations = {c.id: c for c in module.computations}
    sources = tuple(_plain_source(computations, by_id, by_id[i], tuple_args)
                    for i in elements)
    return HloFacts(module_name=module.name, aliases=aliases, unused_donors=donors,
                    result_sources=sources)


def _copied_operand(computations: dict[int, Any], instr: Any) -> int | None:
    """The operand a fusion returns through copies only, else ``None``."""
    if instr.opcode != "fusion" or len(instr.called_computation_ids) != 1:
        return None
    fused = computations.get(instr.called_computation_ids[0])
    if fused is None:
        return None
    inner = {i.id: i for i in fused.instructions}
    node = inner.get(fused.root_id)
    while node is not None and node.opcode == "copy" and node.operand_ids:
        node = inner.get(node.operand_ids[0])
    return int(node.parameter_number) if node is not None and node.opcode == "parameter" \
        else None


def _entry_computation(module: Any) -> Any:
    for computation in module.computations:
        if computation.id == module.entry_computation_id:
            return computation
    raise HloDecodeError(f"module {module.name!r} has no entry computation")


def _plain_source(computations: dict[int, Any], by_id: dict[int, Any], instr: Any,
                  tuple_args: bool) -> int | None:
    """The argument whose value this instruction is, through ``copy`` only: a
    ``copy`` instruction, or a fusion that only copies one of its operands
    (XLA:GPU wraps each instruction it leaves unfused in a fusion of its own,
    ``wrapped_copy``), seen through tuples built and taken apart on the way
    (XLA:GPU, JAX 0.11.2: ``copy(get-tuple-element(tuple(param, ...), 0))``)."""
    while instr.operand_ids:
        if instr.opcode == "copy":
            instr = by_id[instr.operand_ids[0]]
            continue
        if instr.opcode == "get-tuple-element":
            built = by_id[instr.operand_ids[0]]
            if built.opcode == "tuple" and instr.tuple_index < len(built.operand_ids):
                instr = by_id[built.operand_ids[instr.tuple_index]]
                continue
        operand = _copied_operand(computations, instr)
        if operand is None or operand >= len(instr.operand_ids):
            break
        instr = by_id[instr.operand_ids[operand]]
    if instr.opcode == "parameter" and not tuple_args:
        return int(instr.parameter_number)
    if instr.opcode == "get-tuple-element" and tuple_args:
        operand = by_id[instr.operand_ids[0]]
        if operand.opcode == "parameter":
            return int(instr.tuple_index)
    return None
