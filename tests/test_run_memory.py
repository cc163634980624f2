"""Device memory over the run: the high-water mark, what was alive at it, the trace.

Ground truth is JAX's own: the program itself sums ``jax.live_arrays()`` just
before the call, outside that call's arguments, and the call's peak is the
one its function's report gives (equal to ``memory_analysis()``, tested
elsewhere). Per-device bytes are checked against each array's
``addressable_shards``.
"""

from __future__ import annotations

import gc
import json
import textwrap
from array import array
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from click.testing import CliRunner

from memscope.analysis.run_memory import CallFacts, CallLog, Holder, RawGroup, RawSample, run_memory
from memscope.capturing import residency
from memscope.capturing.residency import per_device_bytes
from memscope.check.judge import RUN_PEAK, check_report
from memscope.check.records import Config
from memscope.cli import cli
from memscope.flow import run_and_report, run_fit
from memscope.program.runner import Script
from memscope.render.terminal import render_report
from memscope.report import Report, load_report

DEVICE = f"{jax.devices()[0].platform}:{jax.devices()[0].id}"

TRAIN_THEN_EVAL = """
import jax, jax.numpy as jnp, json, pathlib, sys

dataset = jax.device_put(jnp.arange(64 * 256, dtype=jnp.float32).reshape(64, 256))  # DATASET

def init():
    params = {"w1": jnp.ones((256, 256)) * 0.01, "w2": jnp.ones((256, 256)) * 0.01}
    zeros = jax.tree.map(jnp.zeros_like, params)
    return params, (zeros, jax.tree.map(jnp.zeros_like, params))

@jax.jit
def train_step(params, opt, x):
    def loss(p):
        return jnp.mean(jnp.tanh(x @ p["w1"]) @ p["w2"])
    value, grads = jax.value_and_grad(loss)(params)
    m = jax.tree.map(lambda a, g: 0.9 * a + g, opt[0], grads)
    v = jax.tree.map(lambda a, g: 0.99 * a + g * g, opt[1], grads)
    params = jax.tree.map(lambda p, a, b: p - 1e-3 * a / (jnp.sqrt(b) + 1e-8), params, m, v)
    return params, (m, v), value

@jax.jit
def eval_step(params, x):
    h = jnp.tanh(x @ params["w1"])
    wide = jnp.concatenate([h, h * 2, h * 3, h * 4], axis=1)
    return jnp.sum(jnp.tanh(wide @ jnp.tile(params["w2"], (4, 1))), axis=1)

params, opt = init()
losses = []
for i in range(%(steps)d):
    params, opt, loss = train_step(params, opt, dataset[(i %% 4) * 16:(i %% 4 + 1) * 16])
    losses.append(loss)
x_eval = jnp.ones((2048, 256))
taken = {id(a) for a in jax.tree.leaves((params, x_eval))}
truth = sum(a.nbytes for a in jax.live_arrays() if id(a) not in taken)
pathlib.Path(sys.argv[1]).write_text(json.dumps(truth))
print(eval_step(params, x_eval).shape)
"""


def _run(tmp_path: Path, source: str, *args: str) -> Report:
    script = tmp_path / "prog.py"
    script.write_text(textwrap.dedent(source))
    gc.collect()  # earlier tests' garbage must not be freed in the middle of this run
    return run_and_report(Script(str(script), args), advise=False)


def _line_of(tmp_path: Path, text: str) -> int:
    lines = (tmp_path / "prog.py").read_text().splitlines()
    return next(i for i, line in enumerate(lines, start=1) if text in line)


@pytest.fixture(scope="module")
def train_then_eval(tmp_path_factory: pytest.TempPathFactory) -> tuple[Report, int, Path]:
    tmp_path = tmp_path_factory.mktemp("run")
    # The sample before a first call is taken while such samples stay within a
    # share of the compile time (residency.FIRST_CALL_SHARE): in a test process
    # holding earlier tests' arrays, under load, it may be skipped, and the
    # eval call estimated. What these tests hold is the sample's answer.
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(residency, "FIRST_CALL_SHARE", 1e9)
        report = _run(tmp_path, TRAIN_THEN_EVAL % {"steps": 12}, str(tmp_path / "truth"))
    return report, json.loads((tmp_path / "truth").read_text()), tmp_path


def test_the_high_water_mark_is_the_eval_call_and_equals_jax_live_arrays(train_then_eval):
    report, truth, tmp_path = train_then_eval
    run = report.runtime.run_memory
    high = run.high_water
    evaluation = next(fn for fn in report.functions if fn.name == "eval_step")
    assert (high.function, high.call, high.exact) == ("eval_step", 13, True)
    assert high.line.endswith(f"prog.py:{_line_of(tmp_path, 'print(eval_step')}")
    # What was alive outside its arguments, by JAX's own count just before the call.
    assert high.resident_bytes == pytest.approx(truth, rel=0.02)
    assert high.call_peak_bytes == evaluation.memory.peak_bytes
    assert high.bytes == high.resident_bytes + evaluation.memory.peak_bytes
    assert high.peak_rule == evaluation.memory.peak_rule
    # Every train step (sampled or estimated) sits below it.
    assert all(p.total_bytes < high.bytes for p in run.points if p.function == "train_step")
    assert run.calls == 13 and run.devices == (DEVICE,)


def test_the_groups_name_the_optimizer_state_the_dataset_and_the_losses(train_then_eval):
    report, _, tmp_path = train_then_eval
    groups = {(g.label, g.held_by): g for g in report.runtime.run_memory.high_water.groups}
    opt = groups["train_step result[1]", "`opt`"]
    assert (opt.kind, opt.arrays, opt.bytes) == ("output", 4, 4 * 256 * 256 * 4)
    data = groups["made outside jit", "`dataset`"]
    assert (data.kind, data.arrays, data.bytes) == ("outside", 1, 64 * 256 * 4)
    assert data.line.endswith(f"prog.py:{_line_of(tmp_path, '# DATASET')}")
    losses = groups["train_step result[2]", "`losses`"]
    assert (losses.arrays, losses.bytes) == (12, 12 * 4)
    # params and x_eval are the call's arguments: not among what else was alive.
    assert not any("result[0]" in label for label, _ in groups)


def test_a_list_of_losses_shows_its_group_growing(train_then_eval):
    report, _, _ = train_then_eval
    sizes = [dict(p.groups).get("train_step result[2] (`losses`)", 0)
             for p in report.runtime.run_memory.points if p.exact]
    assert sizes == sorted(sizes) and sizes[-1] == 12 * 4 and sizes[1] < sizes[-1]


def test_the_terminal_report_answers_with_the_high_water_mark_first(train_then_eval):
    import io

    report, _, _ = train_then_eval
    text = io.StringIO()
    render_report(report, text, width=100, plain=True)
    lines = text.getvalue().splitlines()
    first = next(i for i, line in enumerate(lines) if line.startswith("Run's high-water mark"))
    assert first < next(i for i, line in enumerate(lines) if line.startswith("train_step ("))
    high = report.runtime.run_memory.high_water
    run = report.runtime.run_memory
    assert lines[first].endswith(f"at call 13, eval_step ({high.line}), sampled "
                                 f"({run.sampled} of 13 calls)")
    assert "train_step result[1]: 4 arrays, 1.0 MiB, held by `opt`" in text.getvalue()
    # By default the two largest groups are named, the rest counted. In a pytest
    # process jax.live_arrays() also holds earlier tests' arrays, which may
    # outweigh the dataset: the two named are the largest, whichever they are.
    largest = sorted(high.groups, key=lambda g: -g.bytes)[:2]
    shown = [line for line in lines if line.startswith("  alive: ")]
    assert len(shown) == 3 and shown[-1].startswith(f"  alive: and {len(high.groups) - 2} more")
    for line, group in zip(shown, largest, strict=False):
        assert line.startswith(f"  alive: {group.label}: ")
        assert group.held_by is None or f"held by {group.held_by}" in line
    assert high.bytes > 0


def test_the_report_keeps_the_run_through_json(train_then_eval, tmp_path):
    report, _, _ = train_then_eval
    path = tmp_path / "r.json"
    path.write_text(report.to_json())
    assert load_report(str(path)).runtime.run_memory == report.runtime.run_memory


def test_the_trace_is_chrome_trace_json_whose_counters_are_the_reports(train_then_eval, tmp_path):
    report, _, _ = train_then_eval
    path = tmp_path / "r.json"
    path.write_text(report.to_json())
    trace_file = tmp_path / "run.trace.json"
    result = CliRunner().invoke(cli, ["show", "--trace", str(trace_file), str(path)])
    assert result.exit_code == 0, result.output
    trace = json.loads(trace_file.read_text())
    events = trace["traceEvents"]
    run = report.runtime.run_memory
    for e in events:  # the Trace Event Format's own rules for each phase used
        assert e["ph"] in {"M", "X", "C", "i"} and isinstance(e["pid"], int)
        if e["ph"] != "M":
            assert isinstance(e["ts"], int) and e["ts"] >= 0
        if e["ph"] == "X":
            assert isinstance(e["dur"], int) and e["dur"] >= 0
        if e["ph"] == "C":
            assert all(isinstance(v, int) for v in e["args"].values())
    slices = [e for e in events if e["ph"] == "X"]
    assert [e["args"]["call"] for e in slices] == list(range(1, 14))
    assert {e["name"] for e in slices} == {"train_step", "eval_step"}
    counters = [e for e in events if e["name"] == f"device memory {DEVICE}"]
    starts = [e for e in counters if e["args"]["call peak"] or not any(
        p.peak_bytes for p in run.points if round(p.seconds * 1e6) == e["ts"])]
    for point in run.points:
        at = [e for e in starts if e["ts"] == round(point.seconds * 1e6)]
        assert at and at[0]["args"] == {"resident": point.resident_bytes,
                                        "call peak": point.peak_bytes or 0}
    (mark,) = [e for e in events if e["ph"] == "i"]
    assert mark["args"]["bytes"] == run.high_water.bytes
    groups = [e for e in events if e["name"] == "resident groups"]
    assert groups[-1]["args"]["train_step result[1] (`opt`)"] == 4 * 256 * 256 * 4


def test_check_gates_the_runs_high_water_mark(train_then_eval):
    report, _, _ = train_then_eval
    high = report.runtime.run_memory.high_water.bytes
    over = check_report(report, None, Config(max_run_peak=high - 1))
    verdict = next(v for v in over.functions if v.name == RUN_PEAK)
    assert over.failed and verdict.status == "fail"
    assert "eval_step" in verdict.problems[0] and "over max_run_peak" in verdict.problems[0]
    ok = check_report(report, None, Config(max_run_peak=high))
    assert next(v for v in ok.functions if v.name == RUN_PEAK).status == "pass"


def test_max_run_peak_is_read_from_pyproject(tmp_path, train_then_eval):
    report, _, _ = train_then_eval
    saved = tmp_path / "r.json"
    saved.write_text(report.to_json())
    config = tmp_path / "memscope.toml"
    config.write_text('max_run_peak = "1 KiB"\n')
    result = CliRunner().invoke(cli, ["check", "--report", str(saved), "--config", str(config)])
    assert result.exit_code == 1 and "run high-water mark" in result.output
    config.write_text('max_run_peak = "1 TiB"\n')
    result = CliRunner().invoke(cli, ["check", "--report", str(saved), "--config", str(config)])
    assert result.exit_code == 0, result.output


def test_sharded_arrays_count_their_shard_on_each_device():
    devices = jax.devices("cpu")[:8]
    mesh = jax.sharding.Mesh(np.array(devices).reshape(4, 2), ("data", "model"))
    cases = [((64, 30), jax.sharding.PartitionSpec("data", None)),
             ((64, 30), jax.sharding.PartitionSpec("data", "model")),
             ((10, 7), jax.sharding.PartitionSpec()),  # replicated: whole on each
             ((8, 6), jax.sharding.PartitionSpec(None, "model"))]
    for shape, spec in cases:
        a = jax.device_put(jnp.ones(shape), jax.sharding.NamedSharding(mesh, spec))
        truth = {}
        for shard in a.addressable_shards:
            name = f"{shard.device.platform}:{shard.device.id}"
            truth[name] = truth.get(name, 0) + shard.data.nbytes
        got = dict(per_device_bytes(a.shape, a.dtype, a.sharding, a.nbytes))
        assert got == truth, (shape, spec)


def _sample(call: int, groups: list[RawGroup], arguments=(), entry: int = 0) -> RawSample:
    return RawSample(call=call, seconds=call / 10, count=0, total_bytes=0, line=None,
                     arguments=tuple(arguments), groups=tuple(groups), entry=entry)


def _facts(name: str, peak: int, arguments: int, pruned: frozenset[int] = frozenset()
           ) -> CallFacts:
    return CallFacts(name=name, signature="()", peak_bytes=peak, peak_rule="sum",
                     argument_bytes=arguments, pruned=pruned, buffers=(), call_site=None)


def test_calls_between_samples_are_estimated_and_pruned_arguments_count_as_alive():
    log = CallLog(array("d", [0.1, 0.2, 0.3, 0.4]), array("d", [0.15, 0.25, 0.35, 0.45]),
                  array("i", [0, 0, 1, 0]), ["a", "b"], array("q", [1, 2, 3, 4]))
    state = RawGroup(producer=(0, "result[0]"), holder=Holder("state", "p.py", "module", 0, 9),
                     arrays=2, bytes=(("cpu:0", 1000),))
    samples = [_sample(1, [state], arguments=[(0, (("cpu:0", 300),)), (1, (("cpu:0", 50),))])]
    facts = [_facts("step", 700, 300, frozenset({1})), _facts("big", 5000, 100)]
    run = run_memory(samples, log, facts, calls=4, sample_seconds=0.0, sampling="h",
                     holder_text=lambda h: (f"`{h.name}`", None), functions=[0, 1])
    exact = run.points[0]
    # alive outside its arguments: the state and the argument it prunes
    assert (exact.call, exact.exact, exact.resident_bytes) == (1, True, 1050)
    estimated = {p.call: p for p in run.points if not p.exact}
    # call 3 (big): everything alive at the sample (1350) less its own argument bytes
    assert estimated[3].resident_bytes == 1250 and estimated[3].from_call == 1
    high = run.high_water
    assert (high.call, high.function, high.exact, high.bytes) == (3, "big", False, 6250)
    assert high.from_call == 1
    assert [g.label for g in high.groups] == ["step result[0]"]
    assert [s.function for s in run.spans] == [0, 0, 1, 0]


def test_an_estimate_names_no_group_that_may_be_its_own_arguments():
    # The sample before call 1 (eval) holds the training state outside eval's
    # arguments; at call 2 (step, estimated) that state is step's argument: the
    # sample cannot tell which arrays those are, so no group is named as alive
    # outside step's arguments (they would add up to more than it leaves).
    log = CallLog(array("d", [0.1, 0.2]), array("d", [0.15, 0.25]), array("i", [0, 1]),
                  ["eval", "step"], array("q", [1, 2]))
    state = RawGroup(producer=(1, "result[0]"), holder=Holder("state", "p.py", "module", 0, 9),
                     arrays=2, bytes=(("cpu:0", 1000),))
    samples = [_sample(1, [state], arguments=[(0, (("cpu:0", 10),))])]
    facts = [_facts("eval", 20, 10), _facts("step", 5000, 1000)]
    run = run_memory(samples, log, facts, calls=2, sample_seconds=0.0, sampling="h",
                     holder_text=lambda h: (f"`{h.name}`", None), functions=[0, 1])
    high = run.high_water
    assert (high.call, high.exact, high.resident_bytes) == (2, False, 10)
    assert high.groups == () and high.more_groups == 0


def test_a_run_whose_calls_take_no_device_array_is_placed_on_the_default_device():
    # Nothing alive and no jax.Array argument (a NumPy array, a Python number):
    # no sample names a device, so the call's is JAX's default device.
    log = CallLog(array("d", [0.1]), array("d", [0.2]), array("i", [0]), ["f"], array("q", [1]))
    kwargs = {"calls": 1, "sample_seconds": 0.0, "sampling": "h",
              "holder_text": lambda h: (f"`{h.name}`", None), "functions": [0]}
    run = run_memory([_sample(1, [])], log, [_facts("f", 24, 12)], default_device="cpu:0",
                     **kwargs)
    assert run.devices == ("cpu:0",)
    assert (run.high_water.device, run.high_water.bytes) == ("cpu:0", 24)
    # Where not even that is known, there is no view of the run, and no error.
    assert run_memory([_sample(1, [])], log, [_facts("f", 24, 12)], **kwargs) is None


def test_a_program_whose_only_call_takes_a_numpy_array_is_reported(tmp_path):
    report = _run(tmp_path, """
        import jax, numpy as np
        print(jax.jit(lambda x: x * 2)(np.ones(3, np.float32)))
    """)
    (fn,) = report.functions
    device = f"{jax.devices()[0].platform}:{jax.devices()[0].id}"
    high = report.runtime.run_memory.high_water
    # (what else is alive is earlier tests' arrays, in this process)
    assert (high.device, high.call_peak_bytes) == (device, fn.memory.peak_bytes)
    assert high.bytes == high.resident_bytes + high.call_peak_bytes


def test_a_failure_of_the_run_view_costs_only_the_run_view(tmp_path, monkeypatch):
    from memscope.assemble import run as build

    def broken(*args, **kwargs):
        raise RuntimeError("boom")

    monkeypatch.setattr(build, "over_the_run", broken)
    report = _run(tmp_path, """
        import jax, jax.numpy as jnp
        print(jax.jit(lambda x: x * 2)(jnp.ones(3)))
    """)
    (fn,) = report.functions
    assert fn.memory is not None and fn.memory.peak_bytes
    assert report.runtime.run_memory is None
    assert any("RuntimeError: boom" in note for note in report.notes), report.notes


def test_fit_takes_what_is_alive_outside_the_function_from_the_sample(tmp_path):
    script = tmp_path / "fit_prog.py"
    script.write_text(textwrap.dedent("""
        import jax, jax.numpy as jnp, pathlib, sys
        table = jax.device_put(jnp.ones((512, 1024)))  # 2 MiB alive beside the step

        @jax.jit
        def step(w, batch):
            return w - 0.1 * jnp.mean(batch @ w), jnp.sum(batch)

        w = jnp.ones((64, 64))
        for i in range(3):
            batch = jnp.ones((32, 64))
            taken = {id(w), id(batch)}
            truth = sum(a.nbytes for a in jax.live_arrays() if id(a) not in taken)
            pathlib.Path(sys.argv[1]).write_text(str(truth))
            w, loss = step(w, batch)
    """))
    gc.collect()
    done = run_fit(Script(str(script), (str(tmp_path / "truth"),)), memory=64 * 2**20,
                   batch=("batch",))
    f = done.forecast
    # The run stops at step's second call: what was alive outside its arguments
    # just before it, by the program's own count (the table, the first loss).
    truth = int((tmp_path / "truth").read_text())
    assert f.held_bytes == truth
    assert f.held_bytes >= 512 * 1024 * 4 + 4
    assert f.budget_bytes == 64 * 2**20 - f.held_bytes
    assert "just before its calls" in f.held_note


SHARDED_DONATED = """
import jax, jax.numpy as jnp, json, pathlib, sys
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
import numpy as np

n = %(devices)d
mesh = Mesh(np.array(jax.devices()[:n]), ("d",))
split, whole = NamedSharding(mesh, P("d")), NamedSharding(mesh, P())
state = {"w": jax.device_put(jnp.ones((1024, 64)), split),
         "m": jax.device_put(jnp.zeros((1024, 64)), split),
         "scale": jax.device_put(jnp.ones((64,)), whole)}  # replicated: whole on each

def step(s):
    w = s["w"] * 0.9 + s["m"] * s["scale"]
    return {"w": w, "m": s["m"] * 0.5 + w, "scale": s["scale"] + 1}, jnp.sum(w)

step = jax.jit(step, donate_argnums=0)
seen, losses = [], []
for i in range(4):
    taken = {id(a) for a in jax.tree.leaves(state)}
    outside = {}
    for a in jax.live_arrays():
        if id(a) in taken:
            continue
        # JAX's own placement of each shard (reading a.addressable_shards here
        # would leave per-device arrays behind, which the next count would list)
        for device, index in a.sharding.addressable_devices_indices_map(a.shape).items():
            size = int(np.prod([len(range(*s.indices(d))) for s, d in zip(index, a.shape)]))
            name = f"{device.platform}:{device.id}"
            outside[name] = outside.get(name, 0) + size * a.dtype.itemsize
    seen.append([len(jax.live_arrays()), outside])
    state, loss = step(state)
    losses.append(loss)
pathlib.Path(sys.argv[1]).write_text(json.dumps(seen))
print([len(jax.live_arrays())] + [float(x) for x in losses])
"""


@pytest.mark.parametrize("devices", [1, 4, 8])
def test_sharded_donated_state_is_counted_once_per_device_as_jax_holds_it(tmp_path, devices):
    """A state sharded over the mesh and donated every step: what the run's samples
    hold alive outside the step's arguments is what ``jax.live_arrays()`` holds,
    device by device (the loss scalars), and memscope's reads of the buffers'
    addresses leave the program no array it did not have under python."""
    truth_file = tmp_path / "truth"
    source = SHARDED_DONATED % {"devices": devices}
    plain = tmp_path / "plain.py"
    plain.write_text(textwrap.dedent(source))
    import subprocess
    import sys

    expected = subprocess.run([sys.executable, str(plain), str(tmp_path / "plain_truth")],
                              capture_output=True, text=True, check=True).stdout
    # In a process of its own, as the plain run: the count of live arrays is the
    # program's alone (in this one, earlier tests' arrays may be alive).
    saved = tmp_path / "report.json"
    printed = subprocess.run([sys.executable, "-m", "memscope", "run", "-q", "--no-advice",
                              "-o", str(saved), str(plain), str(truth_file)],
                             capture_output=True, text=True, check=True).stdout
    report = load_report(str(saved))
    # The program's own view of its live arrays is the same as under python.
    assert printed == expected
    assert json.loads(truth_file.read_text()) == json.loads(
        (tmp_path / "plain_truth").read_text())
    seen = json.loads(truth_file.read_text())
    run = report.runtime.run_memory
    exact = {p.call: p for p in run.points if p.exact}
    assert exact, "no call was sampled"
    for call, point in exact.items():
        _, outside = seen[call - 1]
        truth = [outside.get(device, 0) for device in run.devices]
        assert list(point.per_device) == truth, (call, run.devices)
        assert point.resident_bytes == max(truth)
        assert point.resident_bytes < 64 * 1024
    high = run.high_water
    assert high is not None and high.resident_bytes < 64 * 1024
    assert not any(g.kind == "outside" and g.bytes > 1024 for g in high.groups)


def test_naming_what_holds_an_array_runs_no_code_of_the_program(tmp_path, capfd):
    """The variables that hold arrays are found by walking containers and
    attributes, never by flattening the program's pytrees: a framework's flatten
    can change what it caches (Flax NNX's graphs, whose suite failed under
    memscope when it did). A pytree the program never hands JAX is never
    flattened, and its array is still named by the variable that holds it."""
    source = """
        import jax, jax.numpy as jnp

        flattened = []

        class Counting:
            def __init__(self, table):
                self.table = table

        def flatten(c):
            flattened.append(1)
            return (c.table,), None

        jax.tree_util.register_pytree_node(Counting, flatten, lambda _, xs: Counting(*xs))
        holder = Counting(jnp.ones((256, 256)))   # never given to JAX
        step = jax.jit(lambda x: x * 2)
        x = jnp.ones(8)
        for _ in range(4):
            x = step(x)
        print("flattened", len(flattened))
    """
    report = _run(tmp_path, source)
    assert capfd.readouterr().out.splitlines()[-1] == "flattened 0"
    high = report.runtime.run_memory.high_water
    assert any(g.held_by == "`holder.table`" and g.bytes == 256 * 256 * 4
               for g in high.groups), high.groups


def test_objects_that_point_at_each_other_are_walked_once_each(monkeypatch):
    """The user's objects often point at each other at every level (an argparse
    parser's groups and actions do). Naming the holders walks each object once,
    not once per path to it: walked along every path, a parser in the script's
    locals cost 0.8 s per sample and a fifth of a training run
    (docs/performance.md). The array behind them is still named."""
    from memscope.capturing import holders

    class Node:
        pass

    nodes = [Node() for _ in range(40)]
    for node in nodes:
        node.others = list(nodes)  # every node reaches every other, at every depth
        node.group = {"all": nodes, "first": nodes[0]}
    array = jnp.ones(3)
    nodes[-1].table = array
    walked: list[int] = []
    attributes = holders._Walk._attributes

    def counted(self, value, *args):
        walked.append(id(value))
        return attributes(self, value, *args)

    monkeypatch.setattr(holders._Walk, "_attributes", counted)
    found = holders.user_holders({id(array)}, frame=None, namespace={"root": nodes[0]})
    assert found[id(array)].name == "root.others"  # its first attribute that reaches it
    assert sorted(walked) == sorted(map(id, nodes))  # each once


def test_an_unknown_call_peak_is_none_and_reads_n_a_never_zero():
    """A function whose compiled program was not read has no peak: the
    high-water mark's call peak is None, said n/a, and its bytes are the resident
    bytes alone (it used to print "0 B its own peak")."""
    from memscope.views import run_text

    log = CallLog(array("d", [0.1]), array("d", [0.15]), array("i", [0]), ["a"],
                  array("q", [1]))
    state = RawGroup(producer=None, holder=Holder("state", "p.py", "module", 0, 9),
                     arrays=1, bytes=(("cpu:0", 1000),))
    facts = [CallFacts(name="step", signature="()", peak_bytes=None, peak_rule=None,
                       argument_bytes=None, pruned=frozenset(), buffers=(), call_site=None)]
    run = run_memory([_sample(1, [state])], log, facts, calls=1, sample_seconds=0.0,
                     sampling="h", holder_text=lambda h: (f"`{h.name}`", None),
                     functions=[0])
    high = run.high_water
    assert high is not None and high.call_peak_bytes is None and high.bytes == 1000
    assert run_text.parts(high) == ("= 1000 B alive outside its arguments + n/a its own peak "
                                    "(its compiled program was not read)")
