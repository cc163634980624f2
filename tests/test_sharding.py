"""Sharded programs on eight simulated CPU devices, and multi-process runs merged.

The devices come from tests/conftest.py (``--xla_force_host_platform_device_count=8``).
Ground truth as everywhere: per-device bytes are what each shard really holds,
figures are ``memory_analysis()`` computed directly, fates are what the buffers
of every shard do when the call runs.
"""

from __future__ import annotations

import os
import socket
import subprocess

import jax
import jax.numpy as jnp
import pytest
from jax.sharding import AxisType, NamedSharding
from jax.sharding import PartitionSpec as P

from memscope._compat import SAME_SIZE_DONORS
from memscope.assemble.function import function_report
from memscope.assemble.run import build_report
from memscope.capturing import capture
from memscope.errors import ReportFormatError
from memscope.flow import analyze, run_and_report
from memscope.program.runner import Script
from memscope.report import load_report
from memscope.report.merge import merge_reports
from tests.support.cli import MEMSCOPE, cli_error, invoke
from tests.support.samples import SAMPLES
from tests.support.truth import assert_matches_runtime, expected_peak, fates
from tests.support.truth import run_and_report as run_truth
from tests.support.versions import JAX_SERIES, jax_before, jax_since

pytestmark = pytest.mark.skipif(jax.device_count() < 8, reason="needs 8 (simulated) devices")


def auto_mesh(name: str):
    return jax.make_mesh((8,), (name,), axis_types=(AxisType.Auto,))


def sgd(w, m, x):
    g = jax.grad(lambda w: jnp.mean((x @ w) ** 2))(w)
    m = 0.9 * m + g
    return w - 0.1 * m, m


def test_per_device_bytes_are_what_each_shard_holds():
    mesh = auto_mesh("model")
    w = jax.device_put(jnp.ones((16, 64)), NamedSharding(mesh, P(None, "model")))
    m = jax.device_put(jnp.zeros((16, 64)), NamedSharding(mesh, P(None, "model")))
    x = jax.device_put(jnp.ones((32, 16)), NamedSharding(mesh, P()))
    shard_bytes = [a.addressable_shards[0].data.nbytes for a in (w, m, x)]
    layout = NamedSharding(mesh, P(None, "model"))
    f = jax.jit(sgd, donate_argnums=(0, 1), out_shardings=(layout, layout))
    expected = f.lower(w, m, x).compile().memory_analysis()
    report, inputs, pointers, out = run_truth(
        lambda: jax.jit(sgd, donate_argnums=(0, 1), out_shardings=(layout, layout)), w, m, x)
    assert_matches_runtime(report, inputs, pointers, out)
    assert [b.device_bytes for b in report.inputs] == shard_bytes
    assert report.inputs[0].device_bytes == report.inputs[0].bytes // 8
    assert report.inputs[0].shard_shape == (16, 8)
    assert report.inputs[0].sharding == "P(None, 'model') on model=8"
    assert report.inputs[2].device_bytes == report.inputs[2].bytes  # replicated
    assert [o.device_bytes for o in report.outputs] == [b // 8 for b in (o.bytes for o in
                                                                          report.outputs)]
    assert report.devices == 8
    assert report.memory.argument_bytes == expected.argument_size_in_bytes == sum(shard_bytes)
    assert report.memory.peak_bytes == expected_peak(expected)
    assert report.memory.xla_peak_bytes == expected.peak_memory_in_bytes
    assert fates(report)["w"] == ("aliased", "result[0]")


def test_unconstrained_outputs_make_donors_and_the_reason_says_so():
    mesh = auto_mesh("data")
    w = jax.device_put(jnp.ones((16, 4)), NamedSharding(mesh, P("data")))
    report, inputs, pointers, out = run_truth(
        lambda: jax.jit(lambda w: w * 2, donate_argnums=0), w)
    assert_matches_runtime(report, inputs, pointers, out)
    (b,) = report.inputs
    assert b.fate == "donor"
    from memscope.analysis.advice import annotate

    (b,) = annotate(report.inputs, report.outputs, same_size_donors=SAME_SIZE_DONORS)
    assert b.reason.startswith("JAX matched it with result (same shape and dtype) but left "
                               "the alias to XLA, because that output's sharding is left to "
                               "the compiler")
    assert ("XLA used it for result." in b.reason) == (b.output == "result")


@pytest.mark.filterwarnings("ignore:Some donated buffers were not usable")
def test_a_donation_sharded_unlike_its_output_is_unusable_and_says_why():
    mesh = auto_mesh("data")
    w = jax.device_put(jnp.ones((16, 4)), NamedSharding(mesh, P("data")))
    f = jax.jit(lambda w: w * 2, donate_argnums=0, out_shardings=NamedSharding(mesh, P()))
    report = analyze(f, w)
    (b,) = report.inputs
    assert b.fate == "unusable"
    assert b.reason.startswith("result is float32[16,4] too, but sharded differently "
                               "(P() on data=8 vs P('data',) on data=8): JAX pairs the shards "
                               "each device holds, [16, 4] against [2, 4].")


@pytest.mark.parametrize(("sample", "fate"), [("data_parallel.py", "donor"),
                                              ("model_parallel.py", "aliased")])
def test_sharded_sample_programs(sample, fate):
    report = run_and_report(Script(str(SAMPLES / sample), ("--steps", "2")))
    (fn,) = report.functions
    state = [b for b in fn.inputs if b.donated]
    assert len(state) == 8 and {b.fate for b in state} == {fate}
    assert all((b.observed, b.deleted) == ("confirmed", True) for b in state)
    assert all(b.output is not None for b in state)
    assert fn.devices == 8 and fn.findings == ()
    if sample == "model_parallel.py":
        w = next(b for b in fn.inputs if b.path == "params[0]['w']")
        assert (w.shard_shape, w.device_bytes) == ((32, 8), w.bytes // 8)


@jax_since((0, 8), "jax.pmap as a jax.jit of shard_map (jax_pmap_shmap_merge on)")
def test_pmap_is_reported_under_the_users_function():
    with capture() as session:
        def step(w, x):
            return w - 0.1 * jax.lax.pmean(x, "i"), x.sum()

        p = jax.pmap(step, axis_name="i", donate_argnums=0)
        w, _ = p(jnp.ones((8, 4)), jnp.ones((8, 4)))
        # Ready before the call: a first call whose inputs are still being
        # computed is confirmed only if its outputs outlive them (observed n/a
        # otherwise), which depends on the machine's load.
        w.block_until_ready()
        out = p(w, jnp.ones((8, 4)))
    del out
    reports = [function_report(e) for e in session.entries]
    assert {r.name for r in reports} == {"step"}
    sharded = reports[-1]
    assert sharded.devices == 8
    # JAX 0.8's pmap jits shard_map without out_shardings, so JAX leaves the
    # alias to XLA; from 0.9 it passes pmap's output shardings (jax/_src/pmap.py).
    assert sharded.inputs[0].fate == ("donor" if JAX_SERIES < (0, 9) else "aliased")
    assert (sharded.inputs[0].observed, sharded.inputs[0].deleted) == ("confirmed", True)
    # The first call passed a one-device array: pmap copied it onto the mesh, so the
    # donated copy, not the caller's array, was reused. memscope says so.
    first = reports[0]
    assert first.inputs[0].deleted is False
    assert any("did not land there" in f for f in first.findings)


@jax_before((0, 8), "jax.pmap compiling outside jax.jit by default")
def test_before_jax_0_8_pmap_programs_are_said_to_be_missing():
    def step(w, x):
        return w - 0.1 * jax.lax.pmean(x, "i"), x.sum()

    with capture() as session:
        p = jax.pmap(step, axis_name="i")
        p(jnp.ones((8, 4)), jnp.ones((8, 4)))
        p(jnp.ones((8, 4)), jnp.ones((8, 4)))  # the same signature: compiled once
        p(jnp.ones((8, 2)), jnp.ones((8, 2)))
    assert session.entries == []
    report = build_report(session.entries, None, uncaptured_pmaps=session.uncaptured_pmaps)
    assert report.notes == (
        "jax.pmap compiled 2 programs outside jax.jit, which memscope cannot read on JAX "
        f"{jax.__version__} (jax_pmap_shmap_merge is off): they are not in this report; "
        "set jax.config.update('jax_pmap_shmap_merge', True) to see them",)


@jax_before((0, 8), "the jax_pmap_shmap_merge flag being off by default")
def test_before_jax_0_8_pmap_is_reported_with_jax_pmap_shmap_merge():
    before = jax.config.jax_pmap_shmap_merge
    jax.config.update("jax_pmap_shmap_merge", True)
    try:
        with capture() as session:
            def step(w, x):
                return w - 0.1 * jax.lax.pmean(x, "i"), x.sum()

            jax.pmap(step, axis_name="i", donate_argnums=0)(jnp.ones((8, 4)), jnp.ones((8, 4)))
    finally:
        jax.config.update("jax_pmap_shmap_merge", before)
    assert session.uncaptured_pmaps == 0
    (fn,) = [function_report(e) for e in session.entries]
    assert fn.name == "step" and fn.devices == 8


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def two_processes(tmp_path_factory):
    """multi_process.py as two jax.distributed processes on loopback, each under memscope."""
    folder = tmp_path_factory.mktemp("processes")
    env = {**os.environ, "XLA_FLAGS": "--xla_force_host_platform_device_count=2",
           "PYTHONWARNINGS": "ignore"}
    port = str(_free_port())
    runs = [subprocess.Popen([MEMSCOPE, "run", "-q", "-o", str(folder / f"r{i}.json"),
                              str(SAMPLES / "multi_process.py"), "--processes", "2",
                              "--process-id", str(i), "--steps", "2", "--port", port],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
            for i in range(2)]
    outputs = [run.communicate(timeout=300) for run in runs]
    for run, (_, stderr) in zip(runs, outputs, strict=True):
        assert run.returncode == 0, stderr
    return folder, [stdout for stdout, _ in outputs]


def test_each_process_reports_itself_and_the_merge_combines_them(two_processes):
    folder, stdouts = two_processes
    assert "process 0 of 2: final loss" in stdouts[0]
    parts = [load_report(str(folder / f"r{i}.json")) for i in range(2)]
    assert [(r.environment.process_index, r.environment.process_count) for r in parts] == [
        (0, 2), (1, 2)]
    merged_path = folder / "all.json"
    result = invoke("merge", "-o", str(merged_path), str(folder / "r1.json"),
                    str(folder / "r0.json"))
    assert result.exit_code == 0, result.output
    merged = load_report(str(merged_path))
    assert [p.process_index for p in merged.merged_from] == [0, 1]
    (fn,) = merged.functions
    assert fn.processes == (0, 1) and fn.calls == 4 and fn.devices == 4
    assert len(merged.environment.devices) == 4
    assert {b.fate for b in fn.inputs if b.donated} == {"donor"}
    shown = invoke("show", str(merged_path))
    assert shown.exit_code == 0
    assert "merged from 2 processes: 0 (" in shown.stdout
    checked = invoke("check", "--report", str(merged_path), "--baseline", str(merged_path))
    assert checked.exit_code == 0, checked.output


def test_merge_refuses_what_is_not_one_run(two_processes):
    folder, _ = two_processes
    r0 = str(folder / "r0.json")
    assert cli_error("merge", "-o", str(folder / "x.json"), r0) == (
        "give the reports of two or more processes to merge")
    assert cli_error("merge", "-o", str(folder / "x.json"), r0, r0) == (
        f"{r0} and {r0} are both process 0; give one report per process")
    single = run_and_report(Script(str(SAMPLES / "multi_process.py"), ("--steps", "1")))
    with pytest.raises(ReportFormatError, match="disagree on the process count"):
        merge_reports([(r0, load_report(r0)), ("single.json", single)])
