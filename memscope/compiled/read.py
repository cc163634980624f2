"""Read what XLA compiled for one call: memory figures and the buffer facts.

``read_compiled`` goes through JAX's own stages API (``trace`` -> ``lower`` ->
``compile``). Called after JAX has run the call, every stage is a hit in JAX's
caches (``_infer_params`` for tracing, ``_pjit_lower`` for lowering, the
computation's cached executable for compiling): memscope reads the very
executable JAX runs and never compiles a second time.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import jax

from memscope import _compat, _frameworks
from memscope.compiled.buffers import (
    BufferAssignment,
    BufferDecodeError,
    embedded_buffer_assignment,
    read_buffer_assignment,
)
from memscope.compiled.dump import Built, compile_dumped
from memscope.compiled.hlo import parse_module, read_module
from memscope.compiled.liveness import Liveness, schedule_liveness
from memscope.compiled.lowered import (
    MainSignature,
    RefLayout,
    main_signature,
    ref_accesses,
    ref_layout,
)
from memscope.compiled.program import WRITTEN_BACK, Leaf, Program
from memscope.compiled.shardings import describe_sharding
from memscope.report import (
    HostMemory,
    Memory,
    host_figures,
    is_host_kind,
    peak_rule,
    split_host,
)


@dataclass(frozen=True)
class CompiledFacts:
    memory: Memory
    program: Program
    #: XLA's buffer assignment, attributed; ``None`` when this jaxlib gives none
    buffers: BufferAssignment | None = None
    #: why ``buffers`` is ``None``
    buffers_error: str | None = None
    #: bytes live over the schedule (:mod:`memscope.compiled.liveness`); ``None``
    #: without a buffer assignment, or ``liveness_error`` says why
    liveness: Liveness | None = None
    liveness_error: str | None = None
    #: how the buffer assignment was read where ``memory_analysis()`` carries
    #: none (XLA:GPU): ``"compiled"``, from XLA's dump of one more compile of the
    #: program; ``"kept"``, from memscope's cache of that compile in an earlier
    #: run; ``None``: not so (``memory_analysis()`` carried it, or it was given)
    dumped: str | None = field(default=None, compare=False)


class CompiledReadError(RuntimeError):
    """The compiled program does not line up with the call as expected."""


@dataclass(frozen=True)
class CompiledHandles:
    """JAX's own stages of one call, taken from its caches during the call.

    They hold avals, the jaxpr and the executable JAX runs, never the call's
    arrays; :func:`read_handles` reads them later, off the program's path.
    """

    traced: Any
    lowered: Any
    compiled: Any
    #: a compile for a ``--target`` made already (a compile-only analysis), with
    #: XLA's dump of it (:class:`memscope.compiled.dump.Built`); ``None``: a
    #: compile of the machine that ran the call
    built: Any = None


def take_compiled(jitted: Any, args: Sequence[Any], kwargs: dict[str, Any],
                  traced: Any = None) -> CompiledHandles:
    """Trace, lower and compile ``jitted`` for ``args``: cache hits after a real call.

    This is the part that needs the call's arguments and the calling thread's
    JAX settings (a few milliseconds); ``args`` may hold arrays the call just
    donated, as only their shapes, dtypes and shardings are read. ``traced``:
    the call's trace, taken before it (where the call changes its arguments'
    types: a mutable hijax value's).
    """
    if traced is None:
        traced = jitted.trace(*args, **kwargs)
    lowered = _compat.stages.lower(traced)
    return CompiledHandles(_compat.stages.without_call_arrays(traced), lowered, lowered.compile())


def read_handles(handles: CompiledHandles, *, shardings: Sequence[Any] = (),
                 ref_names: Mapping[int, str] | None = None,
                 dump: Dump | None = None) -> CompiledFacts:
    """Read the memory figures and buffer facts of the executable in ``handles``.

    ``shardings`` holds each flat dynamic input's ``jax.sharding.Sharding``
    (``None`` for a non-array); ``ref_names`` names, by ``id``, the Refs the
    function closes over; ``dump`` compiles the program with XLA's dump where
    its buffer assignment is read from one (:func:`read_stages`).
    """
    return read_stages(handles.traced, handles.lowered, handles.compiled,
                       shardings=shardings, ref_names=ref_names, dump=dump)


def read_stages(traced: Any, lowered: Any, compiled: Any, *,
                shardings: Sequence[Any] = (),
                ref_names: Mapping[int, str] | None = None,
                module: bytes | None = None, assignment: bytes | None = None,
                dump: Dump | None = None) -> CompiledFacts:
    """Read one compiled program from its three stages (``jax.stages``): the
    executable ``compiled``, the ``lowered`` module it came from, and the
    ``traced`` call that names its arguments. ``module`` and ``assignment``
    (serialized) stand in for the executable's own optimized module and buffer
    assignment where XLA gave them apart (its dump: :mod:`memscope.compiled.targets`).
    Where neither they nor the executable carry the assignment (XLA:GPU),
    ``lowered`` is compiled once more with XLA's dump: by ``dump`` where given
    (:func:`memscope.compiled.compile.compile_again_dumped`, through memscope's
    cache), else here."""
    stats = compiled.memory_analysis()
    decoded = parse_module(module if module is not None
                           else _compat.executables.optimized_hlo_module_protos(compiled)[0])
    buffers, error = read_buffers(stats, decoded, compiled, assignment)
    scheduled = decoded  # the module the assignment names (and whose schedule is replayed)
    dumped = None
    if buffers is None and assignment is None:
        scheduled, buffers, error, dumped = _dumped_buffers(lowered, decoded, error,
                                                            dump or _dumped_here)
    program = _program(traced, lowered, compiled, shardings, decoded, ref_names)
    memory = by_memory_kind(memory_figures(stats), program)
    if memory.memory_kind_note is not None and buffers is not None:
        buffers = host_colored(buffers, program, scheduled)
    liveness, liveness_error = read_liveness(scheduled, buffers)
    return CompiledFacts(memory=memory,
                         program=program,
                         buffers=buffers, buffers_error=error, liveness=liveness,
                         liveness_error=liveness_error, dumped=dumped)


def read_compiled(jitted: Any, args: Sequence[Any], kwargs: dict[str, Any], *,
                  shardings: Sequence[Any] = ()) -> CompiledFacts:
    """Lower and compile ``jitted`` for ``args`` (cache hits after a real call) and
    read it: :func:`take_compiled`, then :func:`read_handles`, at once."""
    return read_handles(take_compiled(jitted, args, kwargs), shardings=shardings)


def read_buffers(stats: Any, module: Any, compiled: Any = None, dumped: bytes | None = None
                 ) -> tuple[BufferAssignment | None, str | None]:
    """The buffer assignment of ``compiled``, attributed to ``module`` (the decoded
    optimized module); else ``None`` and why.

    ``memory_analysis()`` carries it on XLA:CPU; XLA:GPU's PJRT plugin leaves it
    out, and there it is read from the serialized executable instead
    (:func:`~memscope.compiled.buffers.embedded_buffer_assignment`). ``dumped``
    is one from XLA's dump (XLA:TPU), read first.
    """
    data = dumped
    if data is None and stats is not None:
        data = _compat.executables.buffer_assignment_bytes(stats)
    if data is None and compiled is not None:
        data = embedded_buffer_assignment(_compat.executables.serialized_executable_payloads(compiled))
    if data is None:
        return None, ("XLA reported no buffer assignment for this program (neither "
                      "memory_analysis() nor the serialized executable holds one)")
    try:
        return read_buffer_assignment(data, module), None
    except BufferDecodeError as e:
        return None, str(e)


#: compiles a lowering once more with XLA's dump: the compile (a
#: :class:`~memscope.compiled.dump.Built`, or what the cache kept of one) and
#: how it was had, ``"compiled"`` or ``"kept"`` (:attr:`CompiledFacts.dumped`)
Dump = Callable[[Any], tuple[Any, str]]


def _dumped_here(lowered: Any) -> tuple[Built, str]:
    """One compile of ``lowered`` with XLA's dump, kept nowhere."""
    return compile_dumped(_compat.stages.lowered_apart(lowered)), "compiled"


def _dumped_buffers(lowered: Any, decoded: Any, error: str | None, dump: Dump
                    ) -> tuple[Any, BufferAssignment | None, str | None, str | None]:
    """The buffer assignment from XLA's dump of one more compile of ``lowered``
    (:mod:`memscope.compiled.dump`), with the module it names, and how it was
    read (:attr:`CompiledFacts.dumped`); else ``decoded``, ``None`` and why. For
    XLA:GPU, whose ``memory_analysis()`` and serialized executable carry none.
    That compile is JAX's own (XLA's default options, the autotuner on), of
    ``lowered`` parsed apart (:func:`memscope._compat.stages.lowered_apart`: JAX's
    caches keep nothing of it), made by ``dump``."""
    try:
        compiled, how = dump(lowered)
    except Exception as e:  # the program itself compiled; a dump that fails is only unknown
        return decoded, None, f"{error}; compiling it again to dump it failed ({e})", None
    if compiled.module is None or compiled.assignment is None:
        return decoded, None, f"{error}, nor XLA's dump of it", how
    module, assignment = compiled.module, compiled.assignment
    dumped = parse_module(module)
    try:
        return dumped, read_buffer_assignment(assignment, dumped), None, how
    except BufferDecodeError as e:
        return decoded, None, str(e), how


def read_liveness(module: Any, buffers: BufferAssignment | None
                  ) -> tuple[Liveness | None, str | None]:
    """Bytes live over ``module``'s schedule under ``buffers``; else ``None`` and why.

    This runs where the compiled program is read: in memscope's worker, off
    the program's path (:mod:`memscope.capturing.worker`).
    """
    if buffers is None:
        return None, "no buffer assignment to replay the schedule over"
    try:
        return schedule_liveness(module, buffers), None
    except (KeyError, IndexError, ValueError) as e:  # a module shaped unlike any seen
        return None, f"the schedule could not be replayed ({type(e).__name__}: {e})"


def memory_figures(stats: Any) -> Memory:
    """Turn ``memory_analysis()`` into :class:`Memory`, its peak by
    :func:`~memscope.report.peak_rule`; ``None`` stats -> all unknown."""
    if stats is None:
        return Memory()

    def get(name: str) -> int | None:
        value = getattr(stats, name, None)
        return None if value is None else int(value)

    argument, output = get("argument_size_in_bytes"), get("output_size_in_bytes")
    alias, temp = get("alias_size_in_bytes"), get("temp_size_in_bytes")
    xla_peak = _compat.executables.peak_memory_bytes(stats)
    peak, rule, text = peak_rule(argument, output, alias, temp, xla_peak)
    return Memory(
        argument_bytes=argument, output_bytes=output, alias_bytes=alias, temp_bytes=temp,
        generated_code_bytes=get("generated_code_size_in_bytes"),
        peak_bytes=peak, peak_is_computed=rule == "sum",
        xla_peak_bytes=xla_peak, peak_rule=rule, peak_rule_text=text,
        host=host_figures(HostMemory(
            argument_bytes=get("host_argument_size_in_bytes"),
            output_bytes=get("host_output_size_in_bytes"),
            alias_bytes=get("host_alias_size_in_bytes"),
            temp_bytes=get("host_temp_size_in_bytes"),
            generated_code_bytes=get("host_generated_code_size_in_bytes")), "xla"),
    )


def compiled_memory(traced: Any, lowered: Any, compiled: Any, *,
                    module: bytes | None = None) -> Memory:
    """The figures of one compiled program whose device figures hold device
    memory only (:func:`by_memory_kind`), for the compiles that read nothing
    else (``fit``, the checkpoint policies). Where no argument or output is in
    host memory, that is ``memory_analysis()`` read as is."""
    memory = memory_figures(compiled.memory_analysis())
    try:
        shardings = tuple(jax.tree_util.tree_leaves(compiled.input_shardings,
                                                    is_leaf=lambda x: x is None))
        outputs = tuple(jax.tree_util.tree_leaves(compiled.output_shardings))
    except Exception:  # no shardings to read: no memory kinds either
        return memory
    if not any(is_host_kind(getattr(s, "memory_kind", None)) for s in (*shardings, *outputs)):
        return memory
    decoded = parse_module(module if module is not None
                           else _compat.executables.optimized_hlo_module_protos(compiled)[0])
    return by_memory_kind(memory, _program(traced, lowered, compiled, shardings, decoded))


def by_memory_kind(memory: Memory, program: Program) -> Memory:
    """``memory`` with its device figures holding device memory only.

    XLA:GPU and TPU report host-resident arguments and outputs in
    ``memory_analysis()``'s ``host_*`` fields; XLA:CPU counts them in the device
    fields and leaves ``host_*`` at 0. Where a ``host_*`` figure is 0 while leaves
    of a host memory kind (their shardings') exist, those leaves' bytes are moved
    from the device figure to the host one: :func:`~memscope.report.split_host`.
    """
    def per_device(leaf: Leaf) -> int:
        return leaf.device_bytes if leaf.device_bytes is not None else leaf.nbytes

    kept = {i for i in program.arg_inputs if i is not None}
    host_inputs = {i for i in kept if program.inputs[i].in_host_memory}
    argument = sum(per_device(program.inputs[i]) for i in host_inputs)
    output = sum(per_device(program.outputs[o]) for o in program.result_outputs
                 if o is not None and program.outputs[o].in_host_memory)
    alias = sum(per_device(program.inputs[i]) for a in program.hlo.aliases
                if a.argument < len(program.arg_inputs)
                and (i := program.arg_inputs[a.argument]) is not None and i in host_inputs)
    return split_host(memory, argument, output, alias)


#: XLA's memory space (and buffer colour) of host memory: ``S(5)`` in HLO layouts.
HOST_MEMORY_SPACE = 5


def host_colored(buffers: BufferAssignment, program: Program, module: Any
                 ) -> BufferAssignment:
    """``buffers`` with the allocations of host-memory arguments and outputs in
    XLA's host colour, as XLA:GPU and TPU assign them; XLA:CPU leaves them in
    the device's (colour 0), where the device timeline would count them."""
    host_args = {arg for arg, i in enumerate(program.arg_inputs)
                 if i is not None and program.inputs[i].in_host_memory}
    entry = next((c for c in module.computations if c.id == module.entry_computation_id), None)
    root = None if entry is None else next(
        (x for x in entry.instructions if x.id == entry.root_id), None)
    results = list(root.operand_ids) if root is not None and root.opcode == "tuple" else (
        [root.id] if root is not None else [])
    host_defs = {instr for j, instr in enumerate(results)
                 if j < len(program.result_outputs)
                 and (o := program.result_outputs[j]) is not None
                 and program.outputs[o].in_host_memory}

    def host(a: Any) -> bool:
        if a.parameter is not None:
            return a.parameter in host_args
        return a.kind == "output" and bool(a.slots) and all(
            buffers.buffers[s.buffer].instruction_id in host_defs for s in a.slots
            if s.buffer in buffers.buffers)

    return dataclasses.replace(buffers, allocations=tuple(
        dataclasses.replace(a, color=HOST_MEMORY_SPACE) if a.color == 0 and host(a) else a
        for a in buffers.allocations))


def _shard_shape(sharding: Any, shape: tuple[int, ...]) -> tuple[int, ...] | None:
    try:
        return tuple(int(d) for d in sharding.shard_shape(shape))
    except Exception:  # no sharding, or one that cannot say (e.g. unspecified)
        return None


def _leaves(infos: Sequence[Any], names: Sequence[str] | None, prefix: str,
            shardings: Sequence[Any] = ()) -> tuple[Leaf, ...]:
    leaves = []
    for i, info in enumerate(infos):
        path = names[i] if names is not None else f"{prefix}{i}"
        try:
            shape = tuple(int(d) for d in info.shape)
        except (TypeError, AttributeError):  # a token (jax.lax.create_token()): no shape
            leaves.append(Leaf(path=path, shape=(), dtype="token", nbytes=0))
            continue
        sharding = shardings[i] if i < len(shardings) else None
        shard_shape = _shard_shape(sharding, shape) if sharding is not None else None
        leaves.append(Leaf(
            path=path,
            shape=shape,
            dtype=str(info.dtype),
            nbytes=_compat.values.leaf_nbytes(shape, info.dtype),
            sharding=describe_sharding(sharding),
            shard_shape=shard_shape,
            device_bytes=(None if shard_shape is None
                          else _compat.values.leaf_nbytes(shard_shape, info.dtype)),
            memory_kind=getattr(sharding, "memory_kind", None)))
    return tuple(leaves)


def _output_shardings(compiled: Any, count: int) -> tuple[Any, ...]:
    try:
        flat = jax.tree_util.tree_leaves(compiled.output_shardings)
    except Exception:
        return ()
    return tuple(flat) if len(flat) == count else ()


def _device_count(shardings: Sequence[Any]) -> int | None:
    devices: set[int] = set()
    for s in shardings:  # (by id: a kept sharding's devices are their ids)
        devices |= {d if isinstance(d, int) else d.id for d in getattr(s, "device_set", ())}
    return len(devices) or None


@dataclass(frozen=True)
class _CallLeaves:
    """A call's flat leaves as its compiled program takes and gives them: each
    hijax value (:func:`memscope._compat.values.high_layout`) as its arrays.

    ``inputs``/``outputs`` are abstract values (shape, dtype), in ``main``'s
    order: the outputs begin with the new values JAX writes back into mutable
    hijax values, then the call's own. ``consts`` has one entry per array of the
    values JAX hoisted out of the function (the first of ``main``'s arguments):
    its name where it is part of a hijax value the function closes over, else
    ``None`` (a hoisted constant).
    """

    inputs: tuple[Any, ...]
    input_names: tuple[str, ...] | None
    donated: tuple[bool, ...]
    outputs: tuple[Any, ...]
    output_names: tuple[str, ...] | None
    consts: tuple[tuple[Any, str] | None, ...] = ()
    #: per flat leaf of the call, how many arrays it is; ``None``: each is one
    arrays: tuple[int, ...] | None = None
    #: how many values JAX hoisted out of the function (the traced jaxpr's first)
    hoisted: int = 0
    #: per input: the role its framework's types say (:func:`memscope._frameworks.type_role`)
    type_roles: tuple[str | None, ...] = ()


def _call_leaves(traced: Any, ref_names: Mapping[int, str]) -> _CallLeaves:
    arg_infos = jax.tree_util.tree_leaves(traced.args_info)
    out_infos = jax.tree_util.tree_leaves(traced.out_info)
    arg_names = _compat.stages.flat_arg_names(traced)
    result_paths = _compat.stages.flat_result_paths(traced)
    high = _compat.values.high_layout(traced)
    if high is not None:
        return _high_call_leaves(traced, high, arg_names, result_paths, ref_names)
    return _CallLeaves(
        inputs=tuple(arg_infos), input_names=_named(arg_names, len(arg_infos)),
        donated=tuple(bool(a.donated) for a in arg_infos),
        outputs=tuple(out_infos), output_names=_named(result_paths, len(out_infos)),
        type_roles=_type_roles(traced, len(arg_infos)))


def _type_roles(traced: Any, count: int) -> tuple[str | None, ...]:
    """Each input's role by its framework's types; ``()`` where they cannot be read."""
    try:
        found = _frameworks.leaf_type_roles(traced.args_info)
    except Exception:  # a pytree node this JAX cannot describe: no types, no roles
        return ()
    return found if len(found) == count else ()


def _named(names: tuple[str, ...] | None, count: int) -> tuple[str, ...] | None:
    return names if names is not None and len(names) == count else None


def _high_call_leaves(traced: Any, high: _compat.values.HighLayout, arg_names: tuple[str, ...] | None,
                      result_paths: tuple[str, ...] | None, ref_names: Mapping[int, str]
                      ) -> _CallLeaves:
    """:class:`_CallLeaves` of a program over hijax values: each value's arrays,
    named from JAX's name for the value (``arg_names``, which may begin with the
    hoisted values'), or ``ref_names``' (by ``id``) for a value the function
    closes over."""
    hoisted = len(high.consts)
    if arg_names is not None and len(arg_names) == hoisted + len(high.inputs):
        arg_names = arg_names[hoisted:]
    in_names = _named(arg_names, len(high.inputs)) or tuple(
        f"arg{i}" for i in range(len(high.inputs)))
    out_names = _named(result_paths, len(high.outputs)) or tuple(
        f"result{j}" for j in range(len(high.outputs)))
    const_names = [ref_names.get(id(x), f"closed-over value #{k}")
                   for k, x in enumerate(_compat.values.hoisted_consts(traced))]
    consts = tuple((aval, name) if value.high else None
                   for value, name in zip(high.consts, const_names, strict=True)
                   for aval, name in zip(value.lo, array_names(value, name), strict=True))
    names = [*const_names, *in_names]
    written = [(aval, name + WRITTEN_BACK) for k, value in high.written_back
               for aval, name in zip(value.lo, array_names(value, names[k]), strict=True)]
    # (``args_info`` counts the hoisted values' donation flags as the call's own)
    donated = _compat.stages.traced_donation(traced)[hoisted:]
    ins = [(aval, name, flag)
           for value, name, flag in zip(high.inputs, in_names, donated, strict=True)
           for aval, name in zip(value.lo, array_names(value, name), strict=True)]
    outs = [*written, *((aval, name) for value, name in zip(high.outputs, out_names, strict=True)
                        for aval, name in zip(value.lo, array_names(value, name), strict=True))]
    return _CallLeaves(
        inputs=tuple(a for a, _, _ in ins), input_names=tuple(n for _, n, _ in ins),
        donated=tuple(d for _, _, d in ins),
        outputs=tuple(a for a, _ in outs), output_names=tuple(n for _, n in outs),
        consts=consts, arrays=tuple(len(value.lo) for value in high.inputs), hoisted=hoisted)


def array_names(value: _compat.values.HighValue, name: str) -> list[str]:
    """Each array of a value of the program, named from the call's name for
    the value: a Flax hijax Variable's as JAX names a plain one's
    (``v.value['a']``), another hijax type's by position (``v#0``)."""
    if not value.high:
        return [name]
    paths = _frameworks.hijax_paths(value.described, len(value.lo))
    if paths is not None:
        return [name + p for p in paths]
    return [name] if len(value.lo) == 1 else [f"{name}#{k}" for k in range(len(value.lo))]


def _program(traced: Any, lowered: Any, compiled: Any,
             shardings: Sequence[Any], module: Any = None,
             ref_names: Mapping[int, str] | None = None) -> Program:
    ref_names = ref_names or {}
    call = _call_leaves(traced, ref_names)
    layout = _compat.stages.parameter_layout(lowered)
    refs = ref_layout(lowered)
    main = main_signature(lowered)
    arg_inputs: list[int | None] = []
    closed_ref_args: list[int] = []
    closed_hijax: list[tuple[Any, str, int]] = []
    kept = iter(layout.kept)
    closed_left = refs.closed_over if refs is not None else 0
    for arg, attrs in enumerate(main.args):
        if attrs.get("jax.token"):
            arg_inputs.append(None)
            continue
        flat = next(kept, None)
        if flat is None and closed_left:  # a Ref the function closes over
            closed_left -= 1
            closed_ref_args.append(arg)
            arg_inputs.append(None)
            continue
        if flat is None:
            raise CompiledReadError("the lowered main has more arguments than JAX kept")
        if flat < layout.num_const_args:  # a constant JAX hoisted
            arg_inputs.append(None)
            continue
        flat -= layout.num_const_args
        if flat < len(call.consts):  # an array of a value the function closes over
            const = call.consts[flat]
            if const is not None:
                closed_hijax.append((*const, arg))
            arg_inputs.append(None)
            continue
        arg_inputs.append(flat - len(call.consts))
    if next(kept, None) is not None or closed_left:
        raise CompiledReadError("JAX kept more arguments than the lowered main has")
    result_outputs = _result_outputs(main, refs, len(call.outputs))
    accesses, closed = ref_accesses(traced.jaxpr)
    if call.arrays is not None:  # per array: a hijax value's are never Refs
        accesses = tuple(a for a, n in zip(accesses[call.hoisted:], call.arrays, strict=True)
                         for _ in range(n))

    if module is None:
        module = _compat.executables.optimized_hlo_module_protos(compiled)[0]
    hlo = read_module(module, tuple_args=layout.tuple_args)
    alias_attr = [a.get("tf.aliasing_output") for a in main.args]
    out_shardings = _output_shardings(compiled, len(call.outputs))
    return Program(
        inputs=_leaves(call.inputs, call.input_names, "arg", shardings),
        donated=call.donated,
        outputs=_leaves(call.outputs, call.output_names, "result", out_shardings),
        arg_inputs=tuple(arg_inputs),
        result_outputs=result_outputs,
        requested_alias=tuple(a if isinstance(a, int) and not isinstance(a, bool) else None
                              for a in alias_attr),
        requested_donor=tuple(bool(a.get("jax.buffer_donor")) for a in main.args),
        hlo=hlo,
        devices=_device_count([*shardings, *out_shardings]),
        refs=accesses if any(a is not None for a in accesses) else (),
        **_closed_refs(lowered, closed, closed_ref_args, ref_names),
        closed_hijax=_leaves([a for a, _, _ in closed_hijax], [n for _, n, _ in closed_hijax],
                             ""),
        closed_hijax_args=tuple(arg for _, _, arg in closed_hijax),
        type_roles=call.type_roles,
    )


def _result_outputs(main: MainSignature, refs: RefLayout | None,
                    outputs: int) -> tuple[int | None, ...]:
    """Per result of ``main``: the output it carries, ``None`` for a token or a
    Ref's new value (aliased to its argument: not one of the call's outputs)."""
    writes_back = refs.writes_back if refs is not None else ()
    result_outputs: list[int | None] = []
    outputs_seen = results_seen = 0
    for attrs in main.results:
        if attrs.get("jax.token"):
            result_outputs.append(None)
            continue
        ref_result = results_seen < len(writes_back) and writes_back[results_seen] is not None
        results_seen += 1
        if ref_result:
            result_outputs.append(None)
        else:
            result_outputs.append(outputs_seen)
            outputs_seen += 1
    if outputs_seen != outputs:
        raise CompiledReadError("the lowered main's results do not match the outputs")
    return tuple(result_outputs)


def _closed_refs(lowered: Any, closed: list[tuple[Any, str]], args: list[int],
                 names: Mapping[int, str]) -> dict[str, Any]:
    """The :class:`Program` fields of the Refs a function closes over, each named
    as the user's code names it (``names``: by ``id``), else ``closed-over Ref #k``.
    The Refs are read here and let go."""
    kept = _compat.values.closed_over_refs(lowered)
    access = {id(ref): a for ref, a in closed}
    leaves = []
    for k, ref in enumerate(kept):
        aval = jax.typeof(ref)
        sharding = getattr(ref, "sharding", None)
        (leaf,) = _leaves([aval], [names.get(id(ref), f"closed-over Ref #{k}")], "",
                          [sharding])
        leaves.append(leaf)
    return {"closed_refs": tuple(leaves),
            "closed_ref_access": tuple(access.get(id(ref), "updated") for ref in kept),
            "closed_ref_args": tuple(args)}
