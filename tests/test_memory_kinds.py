"""Memory kinds: device figures hold device memory only, host memory has its own.

An argument or output placed in ``pinned_host`` (its sharding's memory kind)
holds no device memory. XLA:GPU and TPU report such buffers in
``memory_analysis()``'s ``host_*`` fields; XLA:CPU counts them in the device
fields and leaves ``host_*`` at 0, so there memscope moves them by the leaves'
memory kinds. The ground truth: JAX's own shardings and a direct
``jax.jit(...).lower(...).compile().memory_analysis()``.
"""

from __future__ import annotations

import io
import json

import jax
import jax.numpy as jnp
import pytest
from jax.sharding import SingleDeviceSharding

from memscope import _compat
from memscope.assemble.run import build_report
from memscope.capturing import capture
from memscope.compiled.read import compiled_memory
from memscope.flow import analyze
from memscope.render.html import render_html
from memscope.render.terminal import render_report
from memscope.report import peak_rule

DEVICE = jax.devices()[0]
HOST = SingleDeviceSharding(DEVICE, memory_kind="pinned_host")
ON_DEVICE = SingleDeviceSharding(DEVICE)


def _host_array(shape=(256, 512)):
    return jax.device_put(jnp.ones(shape), HOST)


def _stats(jitted, *args):
    return jitted.lower(*args).compile().memory_analysis()


def _cpu_only():
    if jax.default_backend() != "cpu":
        pytest.skip("XLA:CPU's figures: GPU and TPU fill the host_* fields themselves")
    if not _compat.CPU_RUNS_HOST_MEMORY_KINDS:
        pytest.skip(f"jaxlib {_compat.JAXLIB_VERSION} cannot run host memory kinds on CPU")


def test_a_host_argument_and_output_hold_no_device_memory():
    _cpu_only()
    a = _host_array()
    assert a.sharding.memory_kind == "pinned_host"  # JAX's own placement
    f = jax.jit(lambda a: a * 2, out_shardings=HOST)
    raw = _stats(f, a)
    # XLA:CPU counts both in the device fields and reports no host memory
    assert raw.argument_size_in_bytes == raw.output_size_in_bytes == a.nbytes
    assert raw.host_argument_size_in_bytes == raw.host_output_size_in_bytes == 0
    fn = analyze(f, a, advise="full")
    m = fn.memory
    assert (m.argument_bytes, m.output_bytes, m.peak_bytes) == (0, 0, 0)
    assert (m.host.argument_bytes, m.host.output_bytes) == (a.nbytes, a.nbytes)
    assert m.host.peak_bytes == 2 * a.nbytes and m.host.source == "shardings"
    assert m.memory_kind_note is not None and "1.0 MiB" in m.memory_kind_note
    assert m.xla_peak_bytes == raw.peak_memory_in_bytes  # XLA's own, unchanged
    (leaf,) = fn.inputs
    assert (leaf.memory_kind, fn.outputs[0].memory_kind) == ("pinned_host", "pinned_host")
    # never advised: donating it would save no device memory
    assert not leaf.candidate and fn.advice is None


def test_the_same_program_on_the_device_is_advised():
    # the control for the test above: the rule that stays silent there can speak
    x = jnp.ones((256, 512))
    fn = analyze(jax.jit(lambda a: a * 2), x, advise="full")
    assert fn.inputs[0].candidate and fn.advice is not None
    assert fn.memory.host.peak_bytes in (0, None) and fn.memory.memory_kind_note is None


def test_mixed_kinds_count_each_leaf_once_and_the_timeline_holds_the_device_only():
    _cpu_only()
    a, b = _host_array(), jnp.ones((256, 512))

    def f(a, b):
        return a * 2, jnp.tanh(b @ b.T) + 1

    jitted = jax.jit(f, out_shardings=(HOST, ON_DEVICE))
    raw = _stats(jitted, a, b)
    fn = analyze(jitted, a, b, advise=False)
    m = fn.memory
    host_out = a.nbytes  # a * 2 lives in pinned_host too
    assert m.argument_bytes == raw.argument_size_in_bytes - a.nbytes == b.nbytes
    assert m.output_bytes == raw.output_size_in_bytes - host_out
    assert m.peak_bytes == peak_rule(m.argument_bytes, m.output_bytes, m.alias_bytes,
                                     m.temp_bytes, raw.peak_memory_in_bytes
                                     - a.nbytes - host_out)[0]
    assert (m.host.argument_bytes, m.host.output_bytes) == (a.nbytes, host_out)
    # the device's timeline and what is live at its peak: b, never the host array
    t, live = fn.memory_timeline, fn.live_at_peak
    assert t is not None and live is not None
    assert t.held_bytes == m.argument_bytes + m.output_bytes - m.alias_bytes
    assert [x.argument for x in live.buffers if x.kind == "parameter"] == ["b"]
    assert live.bytes <= m.peak_bytes


@pytest.mark.gpu
def test_on_a_gpu_xla_reports_host_memory_itself():
    if jax.default_backend() != "gpu":
        pytest.skip("needs a GPU: XLA:GPU fills memory_analysis()'s host_* fields")
    a = _host_array()
    f = jax.jit(lambda a: a * 2, out_shardings=HOST)
    raw = _stats(f, a)
    fn = analyze(f, a, advise=False)
    m = fn.memory
    assert m.argument_bytes == raw.argument_size_in_bytes
    assert m.host.argument_bytes == raw.host_argument_size_in_bytes
    assert m.host.output_bytes == raw.host_output_size_in_bytes
    assert m.memory_kind_note is None and m.host.source == "xla"


def test_compiles_that_read_only_figures_count_the_device_alone():
    # fit and the checkpoint policies read each compile by compiled_memory
    _cpu_only()
    a = jax.ShapeDtypeStruct((256, 512), jnp.float32, sharding=HOST)
    b = jax.ShapeDtypeStruct((256, 512), jnp.float32)
    jitted = jax.jit(lambda a, b: (a * 2, b + 1), out_shardings=(HOST, ON_DEVICE))
    traced = jitted.trace(a, b)
    lowered = traced.lower()
    compiled = lowered.compile()
    m = compiled_memory(traced, lowered, compiled)
    raw = compiled.memory_analysis()
    host_bytes = 256 * 512 * 4
    assert m.argument_bytes == raw.argument_size_in_bytes - host_bytes
    assert m.output_bytes == raw.output_size_in_bytes - host_bytes
    assert m.host.peak_bytes == 2 * host_bytes
    device = analyze(jitted, _host_array(), jnp.ones((256, 512)), advise=False).memory
    assert m.peak_bytes == device.peak_bytes


def test_terminal_html_and_json_show_the_memory_kind():
    _cpu_only()
    with capture(advise=False) as session:
        jax.jit(lambda a, b: (a * 2, b + 1), out_shardings=(HOST, ON_DEVICE))(
            _host_array(), jnp.ones((256, 512)))
    report = build_report(session.entries, None, session.runtime())
    (fn,) = json.loads(report.to_json())["functions"]
    assert [i["memory_kind"] for i in fn["inputs"]] == ["pinned_host", "device"]
    assert fn["memory"]["host"]["peak_bytes"] == 2 * 256 * 512 * 4
    assert fn["memory"]["memory_kind_note"].startswith("device figures leave out 1.0 MiB")
    out = io.StringIO()
    render_report(report, out, width=120, plain=True)
    assert "host memory (not in the device peak; from the leaves' memory kinds)" in out.getvalue()
    # the answer on top names both memories
    # b and b + 1 (a and a * 2 live in pinned_host), and the result tuple's index
    # table, 8 B per result on CPU
    device = 2 * 256 * 512 * 4 + 8 * 2
    assert report.functions[0].memory.peak_bytes == device
    assert "peak 1.0 MiB per device (+1.0 MiB in host memory)" in out.getvalue()
    page = io.StringIO()
    render_html(report, page)
    assert "input in pinned_host" in page.getvalue() and "Host memory" in page.getvalue()
