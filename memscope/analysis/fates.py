"""Pure functions: compiled program facts -> the fate of every buffer.

No JAX here: the inputs are plain records (:mod:`memscope.compiled.program`)
built by :mod:`memscope.compiled.read`, so every rule can be tested with
hand-built data as well as with real programs.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import NamedTuple

from memscope.compiled.program import Program
from memscope.report import (
    InputBuffer,
    InputFate,
    OutputBuffer,
    OutputFate,
    RefAccess,
)


class Fates(NamedTuple):
    """Every input and output leaf of one compiled program, each with its fate:
    :func:`classify`'s answer, made once per program (the capture's reading
    makes it for the call's program and each variant's, the report reads it)."""

    inputs: tuple[InputBuffer, ...]
    outputs: tuple[OutputBuffer, ...]

    def passed_again(self, again: Mapping[int, int]) -> tuple[InputBuffer, ...]:
        """The inputs, each flat leaf the caller passed again (``again``: by leaf,
        the call that showed it) marked so: the advice never donates it."""
        return tuple(replace(b, passed_again=again[i]) if i in again else b
                     for i, b in enumerate(self.inputs))


def classify(program: Program, warnings: Sequence[str] = ()) -> Fates:
    """Give every input leaf and every output leaf exactly one fate.

    ``warnings`` are the texts JAX raised while lowering; the leaves its
    "not usable" warning names are marked ``in_warning``.
    """
    arg_of_input = {inp: arg for arg, inp in enumerate(program.arg_inputs) if inp is not None}
    alias_of_arg = {a.argument: a.output for a in program.hlo.aliases}
    alias_of_result = {a.output: a.argument for a in program.hlo.aliases}

    def output_path(result: int | None) -> str | None:
        if result is None or result >= len(program.result_outputs):
            return None
        out = program.result_outputs[result]
        return None if out is None else program.outputs[out].path

    def input_of_arg(arg: int | None) -> int | None:
        if arg is None or arg >= len(program.arg_inputs):
            return None
        return program.arg_inputs[arg]

    inputs = []
    for i, leaf in enumerate(program.inputs):
        arg = arg_of_input.get(i)
        fate: InputFate
        partner = None
        ref = _ref_access(program.ref_access(i), arg)
        if arg is None:
            fate = "pruned"
        elif ref is not None:
            # JAX aliases every Ref it keeps to its own new value (a result that
            # is none of the call's outputs), donated or not.
            fate = "aliased" if program.requested_alias[arg] is not None else "not_donated"
        elif not program.donated[i]:
            fate = "not_donated"
        elif program.requested_alias[arg] is not None:
            fate, partner = "aliased", output_path(program.requested_alias[arg])
        elif program.requested_donor[arg]:
            fate, partner = "donor", output_path(alias_of_arg.get(arg))
        else:
            fate = "unusable"
        inputs.append(InputBuffer(
            path=leaf.path, shape=leaf.shape, dtype=leaf.dtype, bytes=leaf.nbytes,
            donated=program.donated[i], fate=fate, output=partner,
            sharding=leaf.sharding, parameter=arg, shard_shape=leaf.shard_shape,
            device_bytes=leaf.device_bytes, memory_kind=leaf.memory_kind, ref=ref))

    closed = dict(zip(program.closed_hijax_args, (leaf.path for leaf in program.closed_hijax),
                      strict=True))
    outputs = []
    for result, out in enumerate(program.result_outputs):
        if out is None:
            continue
        leaf = program.outputs[out]
        ofate: OutputFate = "new"
        source = None
        reused = input_of_arg(alias_of_result.get(result))
        copied_arg = (program.hlo.result_sources[result]
                      if result < len(program.hlo.result_sources) else None)
        copied = input_of_arg(copied_arg)
        if reused is not None:
            ofate, source = "reuses_input", program.inputs[reused].path
        elif copied is not None:
            ofate, source = "copy_of_input", program.inputs[copied].path
        elif copied_arg in closed:  # an array of a closed-over hijax value, unchanged
            ofate, source = "copy_of_input", closed[copied_arg]
        outputs.append(OutputBuffer(path=leaf.path, shape=leaf.shape, dtype=leaf.dtype,
                                    bytes=leaf.nbytes, fate=ofate, input=source,
                                    sharding=leaf.sharding, shard_shape=leaf.shard_shape,
                                    device_bytes=leaf.device_bytes,
                                    memory_kind=leaf.memory_kind))
    return Fates(_mark_warned(tuple(inputs), program, warnings), tuple(outputs))


def _ref_access(access: str | None, arg: int | None) -> RefAccess | None:
    if access is None:
        return None
    if arg is None:
        return "unused"
    known: tuple[RefAccess, ...] = ("updated", "read", "written", "unused")
    for name in known:
        if access == name:
            return name
    return "updated"  # an effect this version does not name: read and written


#: Why a closed-over hijax value's arrays are not donated, and cannot be.
CLOSED_HIJAX = ("the function closes over it, and JAX passes its arrays to the program as "
                "arguments of its own, never donated (a mutable one's new values are "
                "outputs, written back into it after the call); jax.jit donates only "
                "what the call passes: pass it as an argument to donate it")


def closed_over(program: Program) -> tuple[InputBuffer, ...]:
    """The Refs ``program`` closes over, each with its fate: JAX passes each one
    as an argument aliased to its own new value, like a Ref argument; then the
    arrays of the hijax values it closes over, never donated."""
    result = []
    for leaf, access, arg in zip(program.closed_refs, program.closed_ref_access,
                                 program.closed_ref_args, strict=True):
        aliased = arg < len(program.requested_alias) and \
            program.requested_alias[arg] is not None
        result.append(InputBuffer(
            path=leaf.path, shape=leaf.shape, dtype=leaf.dtype, bytes=leaf.nbytes,
            donated=False, fate="aliased" if aliased else "not_donated",
            sharding=leaf.sharding, parameter=arg, shard_shape=leaf.shard_shape,
            device_bytes=leaf.device_bytes, memory_kind=leaf.memory_kind,
            ref=_ref_access(access, arg)))
    for leaf, arg in zip(program.closed_hijax, program.closed_hijax_args, strict=True):
        result.append(InputBuffer(
            path=leaf.path, shape=leaf.shape, dtype=leaf.dtype, bytes=leaf.nbytes,
            donated=False, fate="not_donated", parameter=arg, reason=CLOSED_HIJAX,
            sharding=leaf.sharding, shard_shape=leaf.shard_shape,
            device_bytes=leaf.device_bytes, memory_kind=leaf.memory_kind))
    return tuple(result)


_NOT_USABLE = re.compile(r"Some donated buffers were not usable:\s*(.*?)\.\s*(?:\n|$)")
_AVAL = re.compile(r"[A-Za-z0-9_<>]+\[[0-9,]*\]")


def warned_avals(text: str) -> list[str]:
    """The avals JAX's "not usable" warning lists, in order (``['float32[10]']``)."""
    match = _NOT_USABLE.search(text)
    return _AVAL.findall(match.group(1)) if match else []


def _mark_warned(inputs: tuple[InputBuffer, ...], program: Program,
                 warnings: Sequence[str]) -> tuple[InputBuffer, ...]:
    # JAX lists the unusable donations in argument order, by aval only; pair each
    # listed aval with the next unusable leaf of that aval.
    listed = [aval for text in warnings for aval in warned_avals(text)]
    if not listed:
        return inputs
    marked = list(inputs)
    for i, buf in enumerate(inputs):
        aval = program.inputs[i].aval_text
        if buf.fate == "unusable" and aval in listed:
            listed.remove(aval)
            marked[i] = replace(buf, in_warning=True)
    return tuple(marked)

