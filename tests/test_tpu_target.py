"""``--target tpu:TOPOLOGY``: the captured programs compiled with XLA:TPU (libtpu) on a
machine without TPUs, checked against JAX's own direct compile for the topology.

The direct compile is JAX's documented way: ``ShapeDtypeStruct``s sharded over the
topology's devices (``jax.experimental.topologies``), ``jax.jit(...).trace(...)
.lower(lowering_platforms=("tpu",)).compile().memory_analysis()``. memscope's own
path carries a program traced on this machine's CPU over to those devices; both
must give XLA:TPU's very figures.

These tests need libtpu, in memscope's own folder (``memscope install-compiler
tpu``, as the README's test command does; CI's on the newest JAX series) or in
the Python environment. Each CLI test runs memscope in a subprocess, as JAX must start
with the target's device count.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from memscope.compiled.compile import compile_to_read
from memscope.compiled.targets import TargetMismatch, TargetSetupError, compilers, tpu
from memscope.report import Memory, hbm_peak_rule
from memscope.report.units import format_bytes
from tests.support.runs_again import run_twice_on_one_cache
from tests.support.terminal import run_in_terminal, screen

pytestmark = pytest.mark.skipif(
    not tpu.available(), reason=f"libtpu is not installed ({tpu.libtpu_install_line()})")

TOPOLOGIES = ["v5e:2x2", "v5p:2x2x1"]


def _devices(topology: str) -> list:
    # JAX's CPU backend has started in this process (8 devices): the topology
    # API needs no backend of its own, only libtpu loaded (memscope's own, where
    # it is not installed beside JAX).
    compilers.load_compiler("tpu")
    return tpu._topology(tpu.parse_spec(f"tpu:{topology}"))


def _step(w, x):
    y = jnp.tanh(x @ w)
    return w - 0.01 * (x.T @ y), y.sum()


def _direct(topology: str, fun, shapes, specs, donate=()):
    """JAX's own compile of ``fun`` for the topology: the ground truth."""
    devices = _devices(topology)
    mesh = Mesh(np.array(devices).reshape(len(devices)), ("d",))
    args = [jax.ShapeDtypeStruct(s, jnp.float32, sharding=NamedSharding(mesh, spec))
            for s, spec in zip(shapes, specs, strict=True)]
    lowered = jax.jit(fun, donate_argnums=donate).trace(*args).lower(
        lowering_platforms=("tpu",))
    return lowered.compile(compiler_options={})


def _ours(topology: str, fun, shapes, specs, donate=()):
    """memscope's: the program traced here, on 4 of the CPU devices, retargeted."""
    target = tpu.TpuTarget(tpu.parse_spec(f"tpu:{topology}"),
                           {d.id: d for d in _devices(topology)})
    mesh = Mesh(np.array(jax.devices()[:4]), ("d",))
    args = [jax.ShapeDtypeStruct(s, jnp.float32, sharding=NamedSharding(mesh, spec))
            for s, spec in zip(shapes, specs, strict=True)]
    traced = jax.jit(fun, donate_argnums=donate).trace(*args)
    lowered = target.lower(traced)
    return target.read(traced, lowered, compile_to_read(target, traced, lowered),
                       shardings=[a.sharding for a in args])


CASES = {
    "sharded batch": (_step, [(1024, 1024), (4096, 1024)], [P(), P("d")], ()),
    "donated weight": (_step, [(1024, 1024), (4096, 1024)], [P(), P("d")], (0,)),
    "temporaries": (lambda x: jnp.sort(jnp.exp(x) @ jnp.exp(x).T, axis=0).sum(0),
                    [(4096, 512)], [P()], ()),
}


@pytest.mark.parametrize("topology", TOPOLOGIES)
@pytest.mark.parametrize("case", sorted(CASES))
def test_figures_equal_a_direct_compile_for_the_topology(topology: str, case: str) -> None:
    fun, shapes, specs, donate = CASES[case]
    direct = _direct(topology, fun, shapes, specs, donate).memory_analysis()
    facts = _ours(topology, fun, shapes, specs, donate)
    m = facts.memory
    assert (m.argument_bytes, m.output_bytes, m.alias_bytes, m.temp_bytes,
            m.generated_code_bytes, m.xla_peak_bytes) == (
        direct.argument_size_in_bytes, direct.output_size_in_bytes,
        direct.alias_size_in_bytes, direct.temp_size_in_bytes,
        direct.generated_code_size_in_bytes, direct.peak_memory_in_bytes)
    assert facts.program.devices == 4
    if donate:  # XLA:TPU's alias map says the weight's buffer takes the new weight
        assert [(a.argument, a.output) for a in facts.program.hlo.aliases] == [(0, 0)]
        assert m.alias_bytes == 1024 * 1024 * 4


@pytest.mark.parametrize("topology", TOPOLOGIES)
def test_the_peak_is_the_buffer_assignments_hbm_not_xlas_figure(topology: str) -> None:
    """XLA:TPU's peak_memory_in_bytes is another figure (it can count on-chip
    scratch, VMEM, which is not HBM); the HBM a call holds is the buffer
    assignment's memory-space-0 allocations."""
    fun, shapes, specs, donate = CASES["sharded batch"]
    facts = _ours(topology, fun, shapes, specs, donate)
    m, buffers = facts.memory, facts.buffers
    assert buffers is not None and m.peak_rule == "hbm"
    hbm = sum(a.size for a in buffers.allocations if a.color == 0)
    on_chip = sum(a.size for a in buffers.allocations if a.color not in (0, 5))
    assert m.peak_bytes == hbm
    # The HBM holds the arguments and outputs (nothing aliased here) and XLA's
    # temporary block. XLA's own figure is another one: with JAX 0.10's libtpu
    # above the HBM by up to the on-chip scratch, with 0.12's below it; the text
    # says which, by how much, and that the scratch is not HBM.
    assert hbm >= m.argument_bytes + m.output_bytes
    assert on_chip > 0 and m.xla_peak_bytes is not None
    held = m.argument_bytes + m.output_bytes - m.alias_bytes
    assert facts.liveness is not None and facts.liveness.peak_bytes <= hbm
    assert m.xla_peak_bytes <= held + on_chip
    side = "above" if m.xla_peak_bytes > hbm else "below"
    assert (f"XLA's own peak_memory_in_bytes is {format_bytes(m.xla_peak_bytes)}, "
            f"{format_bytes(abs(m.xla_peak_bytes - hbm))} {side} it") in (m.peak_rule_text or "")
    assert "VMEM/CMEM" in (m.peak_rule_text or "")


def test_the_hbm_rule_without_a_buffer_assignment_is_the_sum() -> None:
    memory = Memory(argument_bytes=100, output_bytes=50, alias_bytes=10, temp_bytes=7,
                    xla_peak_bytes=400)
    got = hbm_peak_rule(memory, None, None)
    assert (got.peak_bytes, got.peak_rule) == (147, "sum")
    got = hbm_peak_rule(memory, 160, 240)
    assert (got.peak_bytes, got.peak_rule) == (160, "hbm")
    assert ("XLA's own peak_memory_in_bytes is 400 B, 240 B above it (XLA's figure is not "
            "HBM alone: the chip's own scratch, VMEM/CMEM, 240 B allocated, is outside HBM)"
            ) in (got.peak_rule_text or "")


def test_a_mesh_larger_than_the_target_is_named() -> None:
    target = tpu.TpuTarget(tpu.parse_spec("tpu:v5e:2x2"),
                           {d.id: d for d in _devices("v5e:2x2")})
    mesh = Mesh(np.array(jax.devices()).reshape(4, 2), ("data", "model"))
    with pytest.raises(TargetMismatch, match=r"mesh \(data=4, model=2\) spans 8 "
                                                 r"devices; tpu:v5e:2x2 has 4"):
        target.sharding(NamedSharding(mesh, P("data")))


@pytest.mark.parametrize("text", ["tpu:v9:2x2", "gpu:h100", "tpu:v5p", "v5p:2x2x1"])
def test_unknown_targets_list_the_known_forms(text: str) -> None:
    with pytest.raises(TargetSetupError, match="tpu:v5p:2x2x1"):
        tpu.parse_spec(text)


# --- the command, as a user runs it -------------------------------------------------

PROGRAM = textwrap.dedent("""
    import jax, jax.numpy as jnp
    from jax.sharding import NamedSharding, PartitionSpec as P

    mesh = jax.make_mesh((len(jax.devices()),), ("data",))

    def loss(w, x):
        return jnp.tanh(x @ w).sum()

    @jax.jit
    def step(w, x):
        return w - 0.01 * jax.grad(loss)(w, x)

    w = jax.device_put(jnp.ones((1024, 1024)), NamedSharding(mesh, P()))
    for _ in range(2):
        x = jax.device_put(jnp.ones((4096, 1024)), NamedSharding(mesh, P("data")))
        w = step(w, x)
    print("devices", len(jax.devices()), float(w.sum()))
""")


def _memscope(*args: str, cwd: Path, cache: Path | None = None
              ) -> subprocess.CompletedProcess[str]:
    """``memscope ARGS`` run in ``cwd``; with memscope's compile cache in
    ``cache`` where given (the suite runs without it: tests/conftest.py)."""
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
    if cache is not None:
        env.pop("MEMSCOPE_CACHE", None)
        env["MEMSCOPE_CACHE_DIR"] = str(cache)
    return subprocess.run([sys.executable, "-m", "memscope", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=900)


def test_run_reports_the_targets_figures_beside_the_hosts(tmp_path: Path) -> None:
    script = tmp_path / "train.py"
    script.write_text(PROGRAM)
    started = time.perf_counter()
    done = _memscope("run", "--target", "tpu:v5p:2x2x1", "-o", "r.json", "train.py",
                     cwd=tmp_path)
    wall = time.perf_counter() - started
    assert done.returncode == 0, done.stderr
    # The script ran on the CPU with the topology's 4 devices, and libtpu's
    # warnings about TPU environment variables did not reach the terminal.
    assert "devices 4 " in done.stdout
    assert "TPU_" not in done.stderr and "TPU_" not in done.stdout
    report = json.loads((tmp_path / "r.json").read_text())
    assert report["target"]["name"] == "tpu:v5p:2x2x1"
    assert report["target"]["chip"] == "TPU v5"
    # what the target's compiles cost is in the report: the step's, and its variants'
    overhead = report["runtime"]["overhead"]
    assert overhead["target_compiles"] >= 1 + overhead["variant_compiles"]
    # Each compile's own seconds, summed: the call's own and its advised variant's
    # run side by side (begun at the call), each within the run.
    assert 0 < overhead["target_compile_seconds"] <= overhead["target_compiles"] * wall
    (fn,) = report["functions"]
    # Ground truth: JAX's own compile of the same step for the topology, its mesh
    # made as the script makes its own (jax.make_mesh: explicit axes on JAX 0.10).
    devices = _devices("v5p:2x2x1")
    mesh = jax.make_mesh((4,), ("data",), devices=devices)

    def loss(w, x):
        return jnp.tanh(x @ w).sum()

    def step(w, x):
        return w - 0.01 * jax.grad(loss)(w, x)

    direct = jax.jit(step).trace(
        jax.ShapeDtypeStruct((1024, 1024), jnp.float32, sharding=NamedSharding(mesh, P())),
        jax.ShapeDtypeStruct((4096, 1024), jnp.float32, sharding=NamedSharding(mesh, P("data"))),
    ).lower(lowering_platforms=("tpu",)).compile(compiler_options={}).memory_analysis()
    m = fn["memory"]
    assert (m["argument_bytes"], m["output_bytes"], m["temp_bytes"], m["xla_peak_bytes"]) == (
        direct.argument_size_in_bytes, direct.output_size_in_bytes,
        direct.temp_size_in_bytes, direct.peak_memory_in_bytes)
    assert m["peak_rule"] == "hbm"
    # The figures of the program that ran here (XLA:CPU) are kept beside them.
    here = fn["memory_here"]
    assert here["peak_rule"] in ("xla", "sum") and here["argument_bytes"] == m["argument_bytes"]
    assert "on tpu:v5p:2x2x1" in done.stdout and "here (cpu)" in done.stdout
    # The advice was measured on the target too: its variant's figures are XLA:TPU's.
    advised = next(v for v in fn["variants"] if v["name"] == "advised")
    assert advised["memory"]["peak_rule"] == "hbm"


def test_run_again_reads_the_targets_compiles_from_the_cache(tmp_path: Path) -> None:
    """The target's compiles (the functions', their variants', the policies') are
    kept in memscope's compile cache: a run again compiles nothing for the
    target, and reports the same figures."""
    (tmp_path / "train.py").write_text(PROGRAM)
    (fn,) = run_twice_on_one_cache(lambda name: _memscope(
        "run", "--target", "tpu:v5p:2x2x1", "-o", name, "train.py", cwd=tmp_path,
        cache=tmp_path / "cache"), tmp_path)
    assert fn["memory"]["peak_rule"] == "hbm"


def test_a_mesh_that_does_not_map_is_said_per_function(tmp_path: Path) -> None:
    """A script that sets its own device count (as many examples do) builds a mesh
    the target cannot hold: the function says which mesh and sizes, the run goes on."""
    script = tmp_path / "eight.py"
    script.write_text(textwrap.dedent("""
        import os
        os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=8"
        import jax, jax.numpy as jnp
        from jax.sharding import NamedSharding, PartitionSpec as P
        mesh = jax.make_mesh((8,), ("data",))
        x = jax.device_put(jnp.ones((16, 4)), NamedSharding(mesh, P("data")))
        print("sum", float(jax.jit(lambda a: a * 2)(x).sum()))
    """))
    done = _memscope("run", "--target", "tpu:v5e:2x2", "-o", "r.json", "eight.py",
                     cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "sum 128.0" in done.stdout
    (fn,) = json.loads((tmp_path / "r.json").read_text())["functions"]
    assert fn["memory"] is None and fn["memory_here"] is not None
    assert ("could not compile it for tpu:v5e:2x2: TargetMismatch: the program's mesh "
            "(data=8) spans 8 devices; tpu:v5e:2x2 has 4: build the mesh from 4 of "
            "jax.devices() (this run has 8) or name a target of 8 devices") in fn["error"]


def test_bad_targets_are_one_line_and_exit_2(tmp_path: Path) -> None:
    script = tmp_path / "t.py"
    script.write_text("print('ran')\n")
    done = _memscope("run", "--target", "tpu:v9:2x2", "t.py", cwd=tmp_path)
    assert done.returncode == 2
    assert "ran" not in done.stdout
    (line,) = done.stderr.strip().splitlines()
    assert "tpu:GENERATION:TOPOLOGY" in line and "tpu:v5e:2x4" in line


def test_fit_for_the_target_is_confirmed_by_direct_compiles(tmp_path: Path) -> None:
    """The batch ``fit --target`` gives fits the chip's HBM and one step more does
    not, by JAX's own compiles for the topology (the budget here is --memory)."""
    script = tmp_path / "train.py"
    # The weights donated: no advised donation, so fit makes one search, not two
    # (the peak on the TPU is not linear in the batch: each search compiles
    # about 17 sizes, 3 to 5 s each).
    script.write_text(PROGRAM.replace("@jax.jit", "@functools.partial(jax.jit, donate_argnums=0)")
                      .replace("import jax,", "import functools, jax,"))
    done = _memscope("fit", "--target", "tpu:v5e:2x2", "--memory", "64MiB",
                     "--format", "json", "train.py", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    found = json.loads(done.stdout)
    largest, step = found["largest"], found["step"]
    budget = found["budget_bytes"]
    devices = _devices("v5e:2x2")
    mesh = jax.make_mesh((4,), ("data",), devices=devices)

    def loss(w, x):
        return jnp.tanh(x @ w).sum()

    def step_fn(w, x):
        return w - 0.01 * jax.grad(loss)(w, x)

    target = tpu.TpuTarget(tpu.parse_spec("tpu:v5e:2x2"), {d.id: d for d in devices})

    def peak(batch: int) -> int:
        """JAX's own compile for the topology, its peak by the HBM rule."""
        traced = jax.jit(step_fn, donate_argnums=0).trace(
            jax.ShapeDtypeStruct((1024, 1024), jnp.float32, sharding=NamedSharding(mesh, P())),
            jax.ShapeDtypeStruct((batch, 1024), jnp.float32,
                                 sharding=NamedSharding(mesh, P("data"))))
        lowered = traced.lower(lowering_platforms=("tpu",))
        return target.read(traced, lowered, target.compile(lowered)).memory.peak_bytes

    assert peak(largest) <= budget < peak(largest + step)


def test_the_calls_own_compile_for_the_target_begins_at_the_call(monkeypatch) -> None:
    """With a target, the call's own program is compiled for it from the call on,
    in the worker's compile threads for targets beside JAX's compile of the call
    (memscope.variants.early), not after the call on the worker's thread; the
    figures are those of the compile made after it. Those threads keep the
    program's priority: the target's compiles are the run's answer, and at the
    lowest a loaded machine starves them (Worker.compiler_for)."""
    from memscope.capturing import capture
    from memscope.capturing import counts as counts_module

    def facts(early: bool) -> tuple[object, list[str]]:
        target = tpu.TpuTarget(tpu.parse_spec("tpu:v5e:2x2"),
                               {d.id: d for d in _devices("v5e:2x2")})
        threads: list[str] = []
        real = tpu.TpuTarget._compile

        def recording(self, lowered, options):
            niceness = os.getpriority(os.PRIO_PROCESS, threading.get_native_id())
            threads.append(f"{threading.current_thread().name} {niceness}")
            return real(self, lowered, options)

        with monkeypatch.context() as m:
            m.setattr(tpu.TpuTarget, "_compile", recording)
            m.setattr(counts_module, "EARLY_TRACES", 16 if early else 0)
            with capture(advise="advised", target=target) as session:
                jax.jit(_step)(jnp.ones((1024, 1024)), jnp.ones((4096, 1024)))
        (entry,) = session.entries
        assert entry.error is None
        return entry.facts, threads

    early, early_threads = facts(early=True)
    late, late_threads = facts(early=False)
    # The first compile is the call's own: in a compile thread, begun at the call;
    # else on the worker's own thread, once it reads the call.
    own = os.getpriority(os.PRIO_PROCESS, 0)
    assert re.fullmatch(rf"memscope-worker-compile-target_\d+ {own}", early_threads[0])
    assert late_threads[0] == f"memscope-worker {own}"
    assert early == late


FIT_MLP = textwrap.dedent("""
    import functools, jax, jax.numpy as jnp

    def loss(params, x, y):
        h = jax.nn.relu(x @ params["w1"])
        return -(jax.nn.log_softmax(h @ params["w2"]) * y).sum(-1).mean()

    @functools.partial(jax.jit, donate_argnums=0)
    def step(params, x, y):
        return jax.tree.map(lambda p, g: p - 0.1 * g, params, jax.grad(loss)(params, x, y))

    params = {"w1": jnp.ones((64, 256)) / 64, "w2": jnp.ones((256, 10)) / 256}
    for _ in range(2):
        params = step(params, jnp.ones((32, 64)), jax.nn.one_hot(jnp.arange(32) % 10, 10))
""")


def test_fit_for_a_chip_answers_the_largest_batch_its_compiler_builds(tmp_path: Path) -> None:
    """With no --memory the budget is the chip's HBM, and XLA:TPU refuses a size
    over it (RESOURCE_EXHAUSTED) before memscope's peak reaches the budget. The
    answer is the largest batch the compiler builds: JAX's own compile for the
    chip builds it, and refuses the next size up."""
    (tmp_path / "train.py").write_text(FIT_MLP)
    done = _memscope("fit", "--target", "tpu:v5e:1x1", "--format", "json", "train.py",
                     cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    found = json.loads(done.stdout)
    largest, step = found["largest"], found["step"]
    # The answer is the largest size compiled that fits, below the smallest one
    # refused, whatever the search stopped on (confirmed: the next size up too).
    refused = [r["batch"] for r in found["rows"] if r["refused"]]
    assert refused, found["note"]
    fitting = [r["batch"] for r in found["rows"] if not r["refused"] and r["batch"] < min(refused)]
    assert largest == max(fitting), found
    if found["confirmed"]:
        assert largest + step in refused, found
    (device,) = _devices("v5e:1x1")
    sharding = jax.sharding.SingleDeviceSharding(device)

    def loss(params, x, y):
        h = jax.nn.relu(x @ params["w1"])
        return -(jax.nn.log_softmax(h @ params["w2"]) * y).sum(-1).mean()

    def train(params, x, y):
        return jax.tree.map(lambda p, g: p - 0.1 * g, params, jax.grad(loss)(params, x, y))

    def compile_at(batch: int) -> object:
        f32 = lambda *shape: jax.ShapeDtypeStruct(shape, jnp.float32, sharding=sharding)  # noqa: E731
        return jax.jit(train, donate_argnums=0).trace(
            {"w1": f32(64, 256), "w2": f32(256, 10)}, f32(batch, 64), f32(batch, 10)
        ).lower(lowering_platforms=("tpu",)).compile()

    assert compile_at(largest) is not None
    if found["confirmed"]:  # else the output says the next size up was not compiled
        with pytest.raises(Exception, match="RESOURCE_EXHAUSTED"):
            compile_at(largest + step)


def test_a_first_run_shows_its_compiles_on_a_terminal_and_nothing_with_q(tmp_path) -> None:
    """A --target run waits for its compiles once the program has ended; in a
    terminal it says what is compiling, for which target, how far and how long
    (on stderr, erased before the report); with -q only the program's output
    is written. The step's compile for the TPU takes seconds, the program's
    end one step later (a new cache each run: the compiles are made)."""
    program = [str(Path(__file__).resolve().parent.parent / "benchmarks" / "short" /
                   "scanned_lm.py"), "--steps", "1"]

    def env() -> dict[str, str]:
        return {**os.environ, "MEMSCOPE_CACHE_DIR": tempfile.mkdtemp(dir=tmp_path)}

    command = [sys.executable, "-m", "memscope", "run", "--target", "tpu:v5e:2x2"]
    shown = run_in_terminal([*command, *program], env=env(), timeout=300)
    plain = re.sub(r"\x1b\[[?0-9;]*[A-Za-z]", "", shown.terminal)  # what was drawn, in order
    assert re.search(r"compiling step (as written|with the advised donation)"
                     r"(, step with the advised donation)? for tpu:v5e:2x2 "
                     r"[01] of 2 done, \d+ s", plain), plain[-2000:]
    after = screen(shown.terminal)  # the line is gone, the report is there
    assert not any("compiling step" in line for line in after), after
    assert "memscope report" in after
    quiet = run_in_terminal([*command[:4], "-q", *command[4:], *program], env=env(),
                            timeout=300)
    assert quiet.returncode == 0
    assert re.fullmatch(r"loss \d+\.\d+\r?\n", quiet.terminal), quiet.terminal  # the program's
