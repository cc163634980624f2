"""Compiled facts: figures equal JAX's own, no second compile, the proto schema is right."""

from __future__ import annotations

import re
from functools import partial

import jax
import jax.numpy as jnp
import pytest
from jax import monitoring

from memscope import _compat
from memscope.capturing import capture
from memscope.compiled._hlo_schema import HloModuleProto
from memscope.compiled.buffers import embedded_buffer_assignment
from memscope.compiled.hlo import parse_module, read_module
from memscope.compiled.read import read_buffers, read_stages
from memscope.compiled.targets.here import HereTarget
from memscope.flow import analyze
from tests.support.truth import device_held, expected_peak

BACKEND_COMPILE = "/jax/core/compile/backend_compile_duration"
_events: list[str] = []
monitoring.register_event_duration_secs_listener(lambda name, secs, **kw: _events.append(name))


def _compiles(run) -> int:
    before = _events.count(BACKEND_COMPILE)
    run()
    return _events.count(BACKEND_COMPILE) - before


def _mlp_step(params, x):
    h = jnp.tanh(x @ params["w1"])
    loss = jnp.mean((h @ params["w2"]) ** 2)
    grads = jax.grad(lambda p: jnp.mean((jnp.tanh(x @ p["w1"]) @ p["w2"]) ** 2))(params)
    return jax.tree.map(lambda p, g: p - 0.1 * g, params, grads), loss


def _args():
    params = {"w1": jnp.ones((64, 128)), "w2": jnp.ones((128, 8))}
    return params, jnp.ones((32, 64))


@pytest.mark.parametrize("donate", [(), (0,)])
def test_figures_equal_memory_analysis_computed_directly(donate):
    expected = (jax.jit(_mlp_step, donate_argnums=donate)
                .lower(*_args()).compile().memory_analysis())
    report = analyze(jax.jit(_mlp_step, donate_argnums=donate), *_args())
    m = report.memory
    assert m is not None
    assert m.argument_bytes == expected.argument_size_in_bytes
    assert m.output_bytes == expected.output_size_in_bytes
    assert m.alias_bytes == expected.alias_size_in_bytes
    assert m.temp_bytes == expected.temp_size_in_bytes
    assert m.generated_code_bytes == expected.generated_code_size_in_bytes
    assert m.xla_peak_bytes == expected.peak_memory_in_bytes
    assert m.peak_bytes == expected_peak(expected)
    if jax.default_backend() == "cpu":
        # XLA:CPU's own figure leaves the temporaries out; memscope's does not.
        assert expected.peak_memory_in_bytes < device_held(expected)
        assert m.peak_bytes == device_held(expected) >= m.temp_bytes
        assert m.peak_rule == "sum" and m.peak_is_computed and m.temp_bytes > 0
    assert m.host.argument_bytes == expected.host_argument_size_in_bytes
    assert (m.alias_bytes > 0) == bool(donate)


def test_no_second_compile_of_what_jax_compiled():
    a, b = jnp.ones(10), jnp.ones(3)

    def plain():
        f = jax.jit(lambda x: jnp.sin(x) * 2)
        f(a)
        f(a)
        f(b)

    def measured():
        with capture() as session:
            plain()
        assert [e.calls for e in session.entries] == [2, 1]
        assert all(e.facts is not None for e in session.entries)

    assert _compiles(plain) == 2
    # Where memory_analysis() carries no buffer assignment (XLA:GPU), memscope
    # compiles each signature once more, in its worker, for XLA's dump of it.
    carried = _compat.executables.buffer_assignment_bytes(jax.jit(jnp.sin).lower(a).compile()
                                              .memory_analysis()) is not None
    assert _compiles(measured) == (2 if carried else 4)


def test_argument_and_output_bytes_are_the_leaves_sizes():
    report = analyze(jax.jit(_mlp_step), *_args())
    assert report.memory is not None
    kept = [b for b in report.inputs if b.fate != "pruned"]
    assert report.memory.argument_bytes == sum(b.bytes for b in kept)
    # A tuple of results also holds its table of element pointers (8 bytes each on CPU).
    table = 8 * len(report.outputs)
    assert report.memory.output_bytes == sum(b.bytes for b in report.outputs) + table


def test_computed_peak_where_jaxlib_reports_none():
    from memscope.compiled.read import memory_figures

    class OldStats:  # what an older jaxlib's CompiledMemoryStats carries
        argument_size_in_bytes, output_size_in_bytes = 100, 40
        alias_size_in_bytes, temp_size_in_bytes = 30, 7
        generated_code_size_in_bytes = 0

    m = memory_figures(OldStats())
    assert (m.peak_bytes, m.peak_is_computed) == (100 + 40 - 30 + 7, True)
    assert memory_figures(None).peak_bytes is None


def _module_text_and_facts(f, *args):
    compiled = f.lower(*args).compile()
    (proto,) = _compat.executables.optimized_hlo_module_protos(compiled)
    (module,) = compiled.runtime_executable().hlo_modules()
    return module.to_string(), read_module(proto)


@pytest.mark.filterwarnings("ignore:Some donated buffers were not usable")
def test_schema_field_numbers_agree_with_the_module_text():
    @partial(jax.jit, donate_argnums=(0, 1))
    def f(a, b, keep):
        return a + 1, (b * 2).astype(jnp.bfloat16), keep

    text, facts = _module_text_and_facts(f, jnp.ones((4, 8)), jnp.ones(16), jnp.ones(3))
    header = text.splitlines()[0]
    assert facts.module_name == re.match(r"HloModule (\S+?),", header).group(1)
    # input_output_alias={ {0}: (0, {}, may-alias) }
    aliases = re.findall(r"\{(\d*)\}: \((\d+), \{\}, (may|must)-alias\)", header)
    assert sorted((int(p), int(o)) for o, p, _ in aliases) == sorted(
        (a.argument, a.output) for a in facts.aliases)
    donors = re.search(r"buffer_donor=\{ (.*?) \}", header)
    listed = [int(n) for n in re.findall(r"\((\d+), \{\}\)", donors.group(1))] if donors else []
    assert sorted(listed) == sorted(facts.unused_donors)
    # the root tuple's third element is a copy of parameter 2
    assert facts.result_sources == (None, None, 2)
    assert re.search(r"ROOT .*tuple\(", text)


def test_schema_reads_parameters_metadata_and_shapes():
    f = jax.jit(lambda x, y: (x @ y).sum())
    compiled = f.lower(jnp.ones((4, 8)), jnp.ones((8, 2))).compile()
    (proto,) = _compat.executables.optimized_hlo_module_protos(compiled)
    module = HloModuleProto()
    module.ParseFromString(proto)
    (entry,) = [c for c in module.computations if c.id == module.entry_computation_id]
    params = sorted((i.parameter_number, i.metadata.op_name, tuple(i.shape.dimensions))
                    for i in entry.instructions if i.opcode == "parameter")
    assert params == [(0, "x", (4, 8)), (1, "y", (8, 2))]
    text = compiled.runtime_executable().hlo_modules()[0].to_string()
    assert f"ENTRY %{entry.name} " in text


def _module_with_wrapped_copy():
    """A module shaped as XLA:GPU compiles ``lambda a, keep: (a + 1, keep)``: the
    copy of ``keep`` wrapped in a fusion of its own (``wrapped_copy``)."""
    from memscope.compiled._hlo_schema import HloModuleProto

    module = HloModuleProto(name="jit_f", entry_computation_id=1)
    fused = module.computations.add(name="wrapped_copy_computation", id=2, root_id=21)
    fused.instructions.add(name="param_0", opcode="parameter", id=20, parameter_number=0)
    fused.instructions.add(name="copy.1", opcode="copy", id=21, operand_ids=[20])
    entry = module.computations.add(name="main", id=1, root_id=14)
    entry.instructions.add(name="a", opcode="parameter", id=10, parameter_number=0)
    entry.instructions.add(name="keep", opcode="parameter", id=11, parameter_number=1)
    entry.instructions.add(name="add_fusion", opcode="fusion", id=12, operand_ids=[10],
                           called_computation_ids=[3])
    entry.instructions.add(name="wrapped_copy", opcode="fusion", id=13, operand_ids=[11],
                           called_computation_ids=[2])
    entry.instructions.add(name="tuple", opcode="tuple", id=14, operand_ids=[12, 13])
    adds = module.computations.add(name="fused_add", id=3, root_id=31)
    adds.instructions.add(name="param_0", opcode="parameter", id=30, parameter_number=0)
    adds.instructions.add(name="add", opcode="add", id=31, operand_ids=[30, 30])
    return module


def test_a_copy_wrapped_in_a_fusion_is_a_copy_of_its_operand():
    # XLA:GPU leaves no bare copy in the entry computation (seen on an H100: the
    # pass-through sample's fate was "new" there); only the copying fusion says it.
    facts = read_module(_module_with_wrapped_copy().SerializeToString())
    assert facts.result_sources == (None, 1)


def test_the_serialized_executable_holds_the_assignment_memory_analysis_carries():
    # XLA:GPU's PJRT plugin leaves serialized_buffer_assignment_proto empty (seen
    # on an H100 with jax 0.10.2); memscope then reads the executable's own copy,
    # where it has one (XLA:GPU's of JAX 0.11.2 had none: the dump, below).
    if jax.default_backend() != "cpu":
        pytest.skip("the ground truth, memory_analysis()'s own copy, is XLA:CPU's")
    params, x = _args()
    for donate in ((), (0,)):
        compiled = jax.jit(_mlp_step, donate_argnums=donate).lower(params, x).compile()
        carried = _compat.executables.buffer_assignment_bytes(compiled.memory_analysis())
        assert carried  # on CPU memory_analysis() carries it: the ground truth here
        payloads = _compat.executables.serialized_executable_payloads(compiled)
        assert embedded_buffer_assignment(payloads) == carried


def test_without_memory_analysis_assignment_the_report_reads_the_executable():
    if jax.default_backend() != "cpu":
        pytest.skip("the ground truth, memory_analysis()'s own copy, is XLA:CPU's")
    params, x = _args()
    traced = jax.jit(_mlp_step).trace(params, x)
    lowered = traced.lower()
    compiled = lowered.compile()
    facts = read_stages(traced, lowered, compiled)

    class NoAssignment:  # what XLA:GPU's plugin returns: the figures, no assignment
        serialized_buffer_assignment_proto = b""

    module = parse_module(_compat.executables.optimized_hlo_module_protos(compiled)[0])
    fallback, error = read_buffers(NoAssignment(), module, compiled)
    assert error is None and fallback == facts.buffers
    assert read_buffers(NoAssignment(), module)[0] is None  # nothing else to read


def test_where_neither_holds_it_the_assignment_comes_from_xlas_dump(monkeypatch):
    # XLA:GPU with JAX 0.11.2 (an H200): memory_analysis() and the serialized
    # executable carry no assignment; XLA's dump of one more compile does. On
    # CPU, memory_analysis()'s own copy is the ground truth it must equal.
    params, x = _args()
    traced = jax.jit(_mlp_step).trace(params, x)
    lowered = traced.lower()
    compiled = lowered.compile()
    carried = read_stages(traced, lowered, compiled)
    monkeypatch.setattr(_compat.executables, "buffer_assignment_bytes", lambda stats: None)
    monkeypatch.setattr(_compat.executables, "serialized_executable_payloads", lambda compiled: ())
    dumped = read_stages(traced, lowered, compiled)
    assert dumped.buffers_error is None and carried.buffers is not None
    # the same allocations and buffers (the dump keeps XLA's heap traces too,
    # which memory_analysis()'s copy leaves out on CPU)
    assert (dumped.buffers.allocations, dumped.buffers.buffers) == (
        carried.buffers.allocations, carried.buffers.buffers)
    assert dumped.liveness == carried.liveness
    assert _compiles(lambda: read_stages(traced, lowered, compiled)) == 1  # the dump's own


def _conv_step(w, images):
    x = jax.lax.conv_general_dilated(images[..., None], w, (1, 1), "SAME",
                                     dimension_numbers=("NHWC", "HWIO", "NHWC"))
    return jax.grad(lambda w: jnp.tanh(x).sum() * jnp.sum(w ** 2))(w), x.mean()


@pytest.mark.parametrize(("fun", "make_args", "donate"), [
    (_mlp_step, _args, ()),
    (_mlp_step, _args, (0,)),
    (_conv_step, lambda: (jnp.ones((3, 3, 1, 8)), jnp.ones((4, 16, 16))), ()),
    (lambda x: jax.lax.fori_loop(0, 3, lambda i, c: jnp.sin(c) @ c, x),
     lambda: (jnp.ones((64, 64)),), ()),
])
def test_compiles_made_only_to_read_give_the_same_figures(fun, make_args, donate):
    # Variants, checkpoint policies and fit's sizes compile without optimizing
    # the generated code on XLA:CPU: every figure memscope reads stays the same.
    lowered = jax.jit(fun, donate_argnums=donate).lower(*make_args())
    here = HereTarget()
    plain = lowered.compile()
    cheap = here.compile(lowered, here.options(lowered)).compiled
    a, b = plain.memory_analysis(), cheap.memory_analysis()
    fields = ("argument_size_in_bytes", "output_size_in_bytes", "alias_size_in_bytes",
              "temp_size_in_bytes", "peak_memory_in_bytes", "host_temp_size_in_bytes")
    assert [getattr(a, f) for f in fields] == [getattr(b, f) for f in fields]
    assert _compat.executables.buffer_assignment_bytes(a) == _compat.executables.buffer_assignment_bytes(b)
    assert _compat.executables.flops(plain) == _compat.executables.flops(cheap)
    def instructions(compiled):
        module = parse_module(_compat.executables.optimized_hlo_module_protos(compiled)[0])
        return [(c.name, [(i.name, i.opcode) for i in c.instructions])
                for c in module.computations]
    assert instructions(plain) == instructions(cheap)  # the same optimized HLO
