"""One definition of the peak, against XLA's own figures, and every consumer using it.

On XLA:CPU ``peak_memory_in_bytes`` is argument + output - alias: it leaves out
the temporary allocation, which XLA allocates for the whole call. memscope's
peak is the larger of XLA's figure and argument + output - alias + temp
(``tests.support.truth.expected_peak``); these tests hold every figure memscope derives
from "peak" to it.
"""

from __future__ import annotations

import html
import io
import json
import re
import warnings

import jax
import jax.numpy as jnp
import pytest

from memscope.check.compare import compare_reports
from memscope.check.judge import check_report, figure_value, limit_problems
from memscope.check.records import Budget, Config
from memscope.flow import analyze
from memscope.render.html import render_html
from memscope.report import Report, load_report, peak_rule, save_report
from memscope.report.units import format_bytes
from tests.support.records import report
from tests.support.truth import device_held, expected_peak

N = 1024


def step(w, x):
    """A step whose temporaries (sin(x), its product, its cosine) dwarf its arguments."""
    y = jnp.cos(jnp.sin(x) @ x.T) @ x[:, :1]
    return w + y.sum(), y


def _args():
    return jnp.ones((N, 8)), jnp.ones((N, N))


def _stats(**donation):
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", "Some donated buffers were not usable")
        return jax.jit(step, **donation).lower(*_args()).compile().memory_analysis()


@pytest.fixture(scope="module")
def fn():
    return analyze(jax.jit(step), *_args())


def test_cpu_xla_peak_leaves_out_the_temporaries_and_memscope_does_not(fn):
    stats = _stats()
    m = fn.memory
    assert m.temp_bytes == stats.temp_size_in_bytes
    assert m.xla_peak_bytes == stats.peak_memory_in_bytes
    assert m.peak_bytes == expected_peak(stats) >= m.temp_bytes
    if jax.default_backend() != "cpu":
        pytest.skip("the XLA:CPU rule")
    # XLA:CPU keeps sin(x), its product and the cosine as temporaries of their own,
    # which outweigh the arguments (XLA:GPU fuses them into the matmuls)
    assert m.temp_bytes > stats.argument_size_in_bytes
    # XLA:CPU's own figure adds the allocations of its buffer assignment that no
    # heap-simulator trace covers (it records none on CPU): parameters, outputs and
    # constants, never the temporary block.
    assert stats.peak_memory_in_bytes == sum(
        g.bytes for g in fn.buffers.allocations if g.kind not in ("temporary", "thread_local"))
    assert stats.peak_memory_in_bytes < device_held(stats) - m.temp_bytes // 2
    assert m.peak_bytes == device_held(stats) == (
        stats.argument_size_in_bytes + stats.output_size_in_bytes
        - stats.alias_size_in_bytes + stats.temp_size_in_bytes)
    assert (m.peak_rule, m.peak_is_computed) == ("sum", True)
    assert m.peak_rule_text == (
        "peak = argument + output - alias + temp; XLA's own peak leaves out the "
        "temporaries, which are held for the whole call")
    assert m.xla_peak_bytes == stats.peak_memory_in_bytes


def test_the_rule_as_a_pure_function():
    assert peak_rule(100, 50, 20, 300, 130)[:2] == (430, "sum")
    assert peak_rule(100, 50, 20, 300, 500)[:2] == (500, "xla")
    assert peak_rule(100, 50, 20, 0, 130)[:2] == (130, "xla")
    # XLA:GPU's figures for the transformer sample on an H100 (jax 0.10.2): its own
    # peak counts the temporaries live at once, 37,136 B under the temporary block.
    peak, rule, text = peak_rule(20718596, 20717736, 0, 40343832, 81743028)
    assert (peak, rule) == (81780164, "sum")
    assert text == ("peak = argument + output - alias + temp; XLA's own peak "
                    "counts the temporaries live at once in its heap simulation; the "
                    "whole temporary allocation is held for the call")
    assert peak_rule(100, 50, 20, 300, None) == (
        430, "sum", "peak = argument + output - alias + temp (this jaxlib reports no peak)")
    assert peak_rule(None, 50, 20, 300, 130)[:2] == (130, "xla")
    assert peak_rule(None, 50, 20, 300, None) == (None, None, None)


def test_variants_and_advice_use_the_definition(fn):
    written, donated = _stats(), _stats(donate_argnums=(0,))
    everything = _stats(donate_argnums=(0, 1))
    assert fn.variant("none").memory.peak_bytes == expected_peak(written)
    assert fn.variant("all").memory.peak_bytes == expected_peak(everything)
    assert fn.advice is not None and fn.advice.tried == 'donate_argnames=("w",)'
    assert fn.variant("advised").memory.peak_bytes == expected_peak(donated)
    assert fn.advice.peak_before == expected_peak(written) == fn.memory.peak_bytes
    assert fn.advice.peak_after == expected_peak(donated)


def test_check_budgets_and_diff_use_the_definition(fn):
    stats = _stats()
    now = report(fn)
    assert figure_value(fn, "peak") == expected_peak(stats)
    # A budget between XLA:CPU's figure and what the program holds fails (where
    # XLA's figure is memscope's peak, as on XLA:GPU, a budget a byte under it).
    between = (stats.peak_memory_in_bytes + expected_peak(stats)) // 2
    budget = Config(budgets=(Budget(fn.name, max_peak=min(between, expected_peak(stats) - 1)),))
    (verdict,) = check_report(now, None, budget).functions
    assert verdict.status == "fail"
    # The problem names what holds the memory: temporaries with op and line.
    (problem,) = verdict.problems
    assert problem.startswith(f"peak {format_bytes(expected_peak(stats))} is over max_peak")
    assert re.search(r"; peak made of: other temporaries [\d.]+ MiB \(\d+%\), .*; largest parts: "
                     r".*tests/test_peak\.py:\d+ (sin|cos|dot_general) \(f32\[1024,1024\]\) "
                     r"4\.0 MiB", problem), problem
    (diff,) = compare_reports(now, now)
    peak = next(f for f in diff.figures if f.name == "peak_bytes")
    assert peak.before == peak.after == expected_peak(stats)


def test_the_marker_check_names_the_temporary(fn):
    stats = _stats()
    # a limit at XLA's own figure (under memscope's peak on XLA:CPU; where it is
    # memscope's peak, as on XLA:GPU, a byte under it)
    limit = min(stats.peak_memory_in_bytes, expected_peak(stats) - 1)
    (problem,) = limit_problems([fn], limit)
    assert f"peak {format_bytes(expected_peak(stats))} exceeds the limit" in problem
    assert "; largest parts: " in problem and "tests/test_peak.py:" in problem


def test_html_chart_shows_the_definition(fn):
    out = io.StringIO()
    render_html(report(fn), out)
    chart = re.search(r'<svg class="figures".*?</svg>', out.getvalue()).group(0)
    peak = re.search(r'>peak</text><rect x="80" y="\d+" width="(\d+)".*?>([^<]+)</text>',
                     chart)
    assert peak.group(2) == format_bytes(expected_peak(_stats()))
    assert int(peak.group(1)) == 560  # the longest bar: peak covers every other figure
    assert html.escape(fn.memory.peak_rule_text) in out.getvalue()


def test_an_older_report_is_read_by_the_same_rule(fn, tmp_path):
    """A baseline saved before the rule had XLA's figure as its peak; read now, it is
    held to the one definition, so it compares with a new report of the same program."""
    path = tmp_path / "old.json"
    save_report(report(fn), str(path))
    data = json.loads(path.read_text())
    stats = _stats()
    for f in data["functions"]:
        for m in [f["memory"], *(v["memory"] for v in f["variants"])]:
            m["peak_bytes"] = m.pop("xla_peak_bytes")
            del m["peak_rule"], m["peak_rule_text"]
            m["peak_is_computed"] = False
        f["advice"]["peak_before"] = stats.peak_memory_in_bytes
    path.write_text(json.dumps(data))
    old = load_report(str(path))
    (then,) = old.functions
    assert then.memory == fn.memory
    assert then.advice == fn.advice
    assert not check_report(report(fn), old).failed
    assert Report.from_json(report(fn).to_json()).functions[0] == fn


@pytest.mark.gpu
def test_gpu_peak_against_xla_and_the_heap_replay():
    if jax.default_backend() != "gpu":
        pytest.skip("needs a GPU: XLA records heap-simulator traces only on GPU and TPU")
    stats = _stats()
    b = analyze(jax.jit(step), *_args(), advise=False)
    assert b.memory.xla_peak_bytes == stats.peak_memory_in_bytes
    assert b.memory.peak_bytes == expected_peak(stats)
    # XLA's GPU figure replays the heap-simulator trace; the device still allocates
    # the whole temporary block, fragmentation included, for the call.
    assert b.buffers is not None and b.buffers.replayed_peak == stats.peak_memory_in_bytes
    assert b.memory.peak_bytes >= b.buffers.replayed_peak
    assert b.memory.peak_bytes >= device_held(stats) >= b.memory.temp_bytes
