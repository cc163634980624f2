"""Between calls: recompiles explained, live arrays that keep growing, donation hazards.

Real JAX programs run under memscope (in this process, as ``memscope run`` runs
them); each claim is checked against what JAX itself says: the weak type of
the array the program made, JAX's own compile events, ``jax.live_arrays()``
at the program's end, ``is_deleted()``, and JAX's own error at the call.
"""

from __future__ import annotations

import dataclasses
import gc
import io
import json
import textwrap
from pathlib import Path

import jax
import pytest
from click.testing import CliRunner

from memscope.analysis.growth import MIN_GROWTH, GroupSample, growing
from memscope.analysis.recompiles import LeafShape, SignatureShape, explain, signature_differences
from memscope.capturing import between
from memscope.check.judge import check_report
from memscope.check.records import Budget, Config
from memscope.cli import cli
from memscope.flow import run_and_report
from memscope.program.runner import Script
from memscope.render.html import render_html
from memscope.render.terminal import MAX_BETWEEN, render_report
from memscope.report import Report, load_report, save_report
from memscope.views.summary import summarize
from tests.support.samples import SAMPLES

#: where the programs' arrays live, as reports name it (``cpu:0``; ``gpu:0`` on a GPU)
DEVICE = f"{jax.devices()[0].platform}:{jax.devices()[0].id}"


def _run(tmp_path: Path, source: str, *args: str) -> Report:
    script = tmp_path / "prog.py"
    script.write_text(textwrap.dedent(source))
    # jax.live_arrays() is the whole process's: earlier tests' garbage, freed by
    # the collector in the middle of this run, would make a group seem to fall.
    gc.collect()
    return run_and_report(Script(str(script), args), advise=False)


def _line_of(tmp_path: Path, text: str) -> str:
    lines = (tmp_path / "prog.py").read_text().splitlines()
    return str(next(i for i, line in enumerate(lines, start=1) if text in line))


# --- recompiles ----------------------------------------------------------------------

WEAK = """
import jax, jax.numpy as jnp, json, pathlib, sys
@jax.jit
def step(params, batch):
    return jax.tree.map(lambda p: p * 2, params), jnp.sum(batch)
first = {"w": jnp.full((4,), 0.01%s)}
pathlib.Path(sys.argv[1]).write_text(json.dumps({"weak": jax.typeof(first["w"]).weak_type}))
step(first, jnp.ones((8, 3)))
step({"w": jnp.full((4,), 0.01, dtype=jnp.float32)}, jnp.ones((8, 3)))
"""


def test_a_weak_typed_first_call_is_named_with_the_fix(tmp_path):
    report = _run(tmp_path, WEAK % "", str(tmp_path / "truth.json"))
    assert '"weak": true' in (tmp_path / "truth.json").read_text()  # JAX's own word
    first, second = report.functions
    assert first.recompile is None and first.first_call == 1
    assert second.first_call == 2
    (reason,) = second.recompile.reasons
    assert (reason.path, reason.kind) == ("params['w']", "weak_type")
    assert reason.before == "weak-typed float32[4]" and reason.after == "float32[4]"
    assert "dtype=" in reason.advice
    text = " ".join(f.text for f in summarize(report).functions[1].findings)
    assert "params['w']: weak-typed float32[4] -> float32[4]" in text


def test_a_strongly_typed_first_call_compiles_once(tmp_path):
    report = _run(tmp_path, WEAK % ", dtype=jnp.float32", str(tmp_path / "truth.json"))
    assert '"weak": false' in (tmp_path / "truth.json").read_text()
    (fn,) = report.functions
    assert fn.calls == 2 and fn.recompile is None


NUMPY_FIRST = """
import functools, jax, jax.numpy as jnp, json, numpy as np, pathlib, sys
from memscope._compat.hooks import remove_duration_listener
compiles = []
def heard(event, duration, **kw):
    if event == "/jax/core/compile/backend_compile_duration":
        compiles.append(event)
jax.monitoring.register_event_duration_secs_listener(heard)
@jax.jit
def step(params, batch):
    return jax.tree.map(lambda p: p - 0.1 * batch.sum(), params)
params = {"w": np.ones((4, 3), np.float32), "b": np.zeros(3, np.float32)}  # NumPy, as loaded
batch = jnp.ones(5)
before = len(compiles)
for _ in range(3):
    params = step(params, batch)  # NumPy arrays first, then jax.Arrays: one executable
remove_duration_listener(heard)  # (it would keep this program's arrays alive)
pathlib.Path(sys.argv[1]).write_text(json.dumps({
    "compiles": len(compiles) - before, "dispatch_entries": step._cache_size()}))
"""


def test_numpy_arrays_then_jax_arrays_are_one_program_not_a_recompile(tmp_path):
    # JAX keeps two entries in its dispatch cache (a NumPy array and a
    # jax.Array are told apart there) but traces and compiles once: the second
    # runs the executable of the first. memscope called it "compiled again".
    report = _run(tmp_path, NUMPY_FIRST, str(tmp_path / "truth.json"))
    truth = json.loads((tmp_path / "truth.json").read_text())
    assert truth == {"compiles": 1, "dispatch_entries": 2}  # JAX's own word
    (fn,) = report.functions
    assert fn.calls == 3 and fn.recompile is None
    assert not any("compiled again" in f.text or "signatures" in f.text
                   for f in summarize(report).functions[0].findings)


def test_a_donated_step_first_given_numpy_arrays_is_checked_at_its_first_jax_arrays(tmp_path):
    # NumPy arrays have no device buffer to compare at the first call; the next
    # call, JAX's own arrays in the same executable, shows the donation working.
    source = NUMPY_FIRST.replace("@jax.jit\n",
                                 "@functools.partial(jax.jit, donate_argnums=0)\n").replace(
        "    params = step(params, batch)  # NumPy arrays first, then jax.Arrays: one executable",
        "    old = [x.unsafe_buffer_pointer() if isinstance(x, jax.Array) else None\n"
        "           for x in jax.tree.leaves(params)]\n"
        "    params = step(params, batch)\n"
        "    landed.append([o == x.unsafe_buffer_pointer()\n"
        "                   for o, x in zip(old, jax.tree.leaves(params))])").replace(
        "before = len(compiles)", "before = len(compiles)\nlanded = []").replace(
        '"dispatch_entries": step._cache_size()', '"dispatch_entries": step._cache_size(), '
        '"landed": landed')
    report = _run(tmp_path, source, str(tmp_path / "truth.json"))
    truth = json.loads((tmp_path / "truth.json").read_text())
    assert truth["compiles"] == 1 and truth["landed"][1:] == [[True, True]] * 2
    (fn,) = report.functions
    assert [(b.path, b.observed) for b in fn.inputs if b.donated] == [
        ("params['b']", "confirmed_later"), ("params['w']", "confirmed_later")]
    assert fn.findings == ()


def test_compile_seconds_are_jax_own_compile_events(tmp_path):
    heard: list[float] = []

    def listen(event: str, duration: float, **kwargs: object) -> None:
        if event in between.COMPILE_EVENTS:
            heard.append(duration)

    jax.monitoring.register_event_duration_secs_listener(listen)
    try:
        report = _run(tmp_path, WEAK % "", str(tmp_path / "truth.json"))
    finally:
        from memscope import _compat
        _compat.hooks.remove_duration_listener(listen)
    seconds = [fn.compile_seconds for fn in report.functions]
    assert all(s is not None and s > 0 for s in seconds)
    # Every second memscope counts is one JAX reported (jnp.full's own compiles too).
    assert sum(seconds) <= sum(heard) + 1e-9
    assert "s compiling" in " ".join(f.text for f in summarize(report).functions[1].findings)


def test_a_ragged_last_batch_is_named_as_such(tmp_path):
    report = _run(tmp_path, """
        import jax, jax.numpy as jnp
        @jax.jit
        def loss(w, batch):
            return jnp.sum(batch @ w)
        data = jnp.ones((20, 3))
        w = jnp.ones((3,))
        for start in range(0, 20, 8):
            loss(w, data[start:start + 8])
        """)
    assert [fn.calls for fn in report.functions] == [2, 1]
    (reason,) = report.functions[1].recompile.reasons
    assert (reason.path, reason.kind) == ("batch", "shape")
    assert (reason.before, reason.after) == ("float32[8,3]", "float32[4,3]")
    assert "leading dimension" in reason.advice


SHARDED = """
import jax, jax.numpy as jnp, numpy as np, pathlib, sys
from jax.sharding import NamedSharding, PartitionSpec as P
mesh = jax.make_mesh((8,), ("x",), devices=jax.devices("cpu"),  # simulated: 8 CPU devices
                     **({"axis_types": (jax.sharding.AxisType.Auto,)}
                        if hasattr(jax.sharding, "AxisType") else {}))
f = jax.jit(lambda a: a * 2)
x = np.ones((8, 4), np.float32)
f(jax.device_put(x, NamedSharding(mesh, P())))
heard = []
jax.monitoring.register_event_duration_secs_listener(
    lambda event, duration, **kw: heard.append(event))
f(jax.device_put(x, NamedSharding(mesh, %s)))
pathlib.Path(sys.argv[1]).write_text(
    str(sum(e.endswith("backend_compile_duration") for e in heard)))
"""


def test_equal_shardings_spelled_differently_are_one_signature(tmp_path):
    report = _run(tmp_path, SHARDED % "P(None, None)", str(tmp_path / "compiles"))
    assert (tmp_path / "compiles").read_text() == "0"  # JAX compiled nothing new
    (fn,) = report.functions
    assert fn.calls == 2 and fn.recompile is None


def test_another_sharding_is_named(tmp_path):
    report = _run(tmp_path, SHARDED % "P('x')", str(tmp_path / "compiles"))
    assert int((tmp_path / "compiles").read_text()) >= 1
    (reason,) = report.functions[1].recompile.reasons
    assert (reason.path, reason.kind) == ("a", "sharding")
    assert reason.before.startswith("P()") or reason.before.startswith("P(None")
    assert reason.after.startswith("P('x'")


def test_a_static_argument_and_a_function_that_keeps_recompiling(tmp_path):
    report = _run(tmp_path, """
        import functools, jax, jax.numpy as jnp
        @functools.partial(jax.jit, static_argnums=1)
        def scale(x, k):
            return x * k
        for k in range(5):
            scale(jnp.ones(3), k)
        """)
    assert len(report.functions) == 5
    reasons = report.functions[4].recompile.reasons
    assert [(r.path, r.kind, r.after) for r in reasons] == [("#1", "static", "4")]
    (finding,) = [f for f in summarize(report).between if "keeps recompiling" in f.text]
    assert "5 signatures in 5 calls" in finding.text and "static" in finding.text
    verdicts = check_report(report, None, Config(budgets=(Budget("scale", forbid_recompiles=True),)))
    assert [v.failed for v in verdicts.functions] == [False, True, True, True, True]
    assert "#1: 3 -> 4" in verdicts.functions[4].problems[0]


def test_the_default_report_bounds_the_run_s_findings_and_says_recompiles_briefly(tmp_path):
    # A test suite's run: many functions that keep recompiling. By default the
    # terminal lists the first few run-wide findings and counts the rest, and a
    # recompile says what kind of difference and where; --detail says all.
    defined = "\n".join(f"f{i} = jax.jit(lambda x, k: x * k + {i}, static_argnums=1)"
                        for i in range(8))
    report = _run(tmp_path, "import jax, jax.numpy as jnp\n" + defined + """
fs = [f0, f1, f2, f3, f4, f5, f6, f7]
for f in fs:
    for k in range(4):
        f(jnp.ones((3, 2)), k)
f0(jnp.ones((3, 2), jnp.int32), 0)
""")
    between = summarize(report).between
    assert sum("keeps recompiling" in f.text for f in between) == 8
    default, full = io.StringIO(), io.StringIO()
    render_report(report, default, width=400, plain=True)  # a line per finding
    render_report(report, full, width=400, plain=True, detail=True)
    short = [line for line in default.getvalue().splitlines() if "keeps recompiling" in line]
    assert len(short) == MAX_BETWEEN
    assert f"  and {len(between) - MAX_BETWEEN} more: --detail" in default.getvalue()
    assert sum("keeps recompiling" in line for line in full.getvalue().splitlines()) == 8
    # the recompile of fs[0] with an int32 x: its kind and leaf in the default report
    (brief,) = [f.brief for fn in summarize(report).functions for f in fn.findings
                if f.brief and "a new dtype" in f.brief]
    assert brief.startswith("compiled again at call 33 (differs from signature 1): a new dtype in x")
    assert "x: float32[3,2] -> int32[3,2]" in full.getvalue()


# --- live arrays ---------------------------------------------------------------------

LOOP = """
import jax, jax.numpy as jnp, pathlib, sys
@jax.jit
def train_step(w, x):
    return w * 0.99, {"loss": jnp.sum(x @ w)}
w, x = jnp.ones((8, 8)), jnp.ones((4, 8))
losses = []
for i in range(200):
    w, aux = train_step(w, x)
    %s
pathlib.Path(sys.argv[1]).write_text(str(len(jax.live_arrays())))
"""


def test_a_list_of_device_scalars_is_found_and_its_function_named(tmp_path):
    report = _run(tmp_path, LOOP % "losses.append(aux['loss'])", str(tmp_path / "live"))
    timeline = report.runtime.live_timeline
    # The last sample is taken when the program has ended: JAX's own count then.
    assert timeline.samples[-1].count == int((tmp_path / "live").read_text())
    (growth,) = timeline.growth
    assert growth.produced_by == "train_step result[1]['loss']"
    assert (growth.shape, growth.dtype, growth.bytes_each) == ((), "float32", 4)
    assert growth.per_call == pytest.approx(1.0, abs=0.02)
    assert growth.last_count >= 200
    # a loop that keeps them, named by the list that holds them
    assert (growth.steady, growth.repeated, growth.held_by) == (True, "train_step", "losses")
    (finding,) = summarize(report).between
    assert finding.severity == "problem"
    assert (f"train_step result[1]['loss']: float32[] on {DEVICE}: +1 array per call"
            in finding.text)
    assert "held by `losses`, rising at the calls of train_step" in finding.text
    over = check_report(report, None, Config(max_live_growth=100))
    assert over.failed and "kept growing by" in over.functions[-1].problems[0]
    assert not check_report(report, None, Config(max_live_growth=10_000)).failed


def test_a_list_a_function_keeps_is_found_though_it_is_freed_when_the_function_returns(
        tmp_path):
    # The program's end frees the function's locals: the samples before it judge.
    report = _run(tmp_path, """
        import jax, jax.numpy as jnp
        @jax.jit
        def train_step(w, x):
            return w * 0.99, jnp.sum(x @ w)
        def train(steps):
            w, x = jnp.ones((8, 8)), jnp.ones((4, 8))
            history = []
            for _ in range(steps):
                w, loss = train_step(w, x)
                history.append(loss)
            return w
        train(60)
        """)
    (growth,) = report.runtime.live_timeline.growth
    assert (growth.steady, growth.held_by, growth.produced_by) == (
        True, "history", "train_step result[1]")
    assert growth.first_count <= 2 and growth.last_count >= 31  # the loop's own count
    (finding,) = summarize(report).between
    assert finding.severity == "problem" and "held by `history`" in finding.text


def test_a_public_notebook_that_makes_new_state_per_cell_has_no_growth_problem(tmp_path):
    # Optax's gradient-accumulation notebook, its cells run as one script: each
    # cell makes a new optimizer state or accumulator; no loop keeps anything.
    # The rise between cells is a note naming the variables that hold it.
    gc.collect()
    program = Path(__file__).parent / "programs" / "public" / "optax_gradient_accumulation.py"
    report = run_and_report(Script(str(program)), advise=False)
    assert report.run.outcome == "completed", report.run.error
    between = summarize(report).between
    assert not [f for f in between if f.severity == "problem"], [f.text for f in between]
    assert not any(g.steady for g in report.runtime.live_timeline.growth)
    (note,) = [f for f in between if "rose" in f.text]
    assert note.severity == "info" and "not call after call (no leak)" in note.text
    assert "`opt_state`" in note.text  # the last cell's new optimizer state


def test_a_loop_that_keeps_nothing_has_no_finding(tmp_path):
    report = _run(tmp_path, LOOP % "loss = float(aux['loss'])", str(tmp_path / "live"))
    timeline = report.runtime.live_timeline
    assert timeline.samples[-1].count == int((tmp_path / "live").read_text())
    assert len(timeline.samples) >= 8  # calls 1, 2, 4, ... 128, and the end
    assert timeline.growth == ()
    assert summarize(report).between == ()


def test_growth_that_levels_off_is_not_a_leak():
    key = ((), "float32", None, 0)
    loop = frozenset({0})
    steady = [GroupSample(c, {key: (min(c, 50), 4)}, loop)
              for c in (1, 2, 4, 8, 16, 32, 64, 128, 256)]
    assert growing(steady) == ()
    rising = [GroupSample(c, {key: (c, 4)}, loop) for c in (1, 2, 4, 8, 16)]
    (g,) = growing(rising, functions={0: "train_step"})
    assert (g.first_count, g.last_count, g.steady, g.repeated) == (2, 16, True, "train_step")
    small = [GroupSample(c, {key: (min(c, MIN_GROWTH), 4)}, loop) for c in (1, 2, 3, 4)]
    assert growing(small) == ()


def test_a_one_off_rise_is_no_leak_and_its_count_starts_where_it_rose():
    # A notebook: one cell's loop calls step (set-up: 8 arrays), the next makes a
    # new optimizer state (48 more, once) and runs update in a loop; nothing
    # grows call after call.
    key = ((64,), "float32", None, 1)
    counts = {1: 0, 2: 0, 4: 0, 8: 0, 16: 0, 17: 0, 18: 48, 32: 48, 34: 48}
    called = {2: {0}, 4: {0}, 8: {0}, 16: {0}, 17: {0}, 18: {2}, 32: {1}, 34: {1}}
    samples = [GroupSample(c, {key: (n, 256)}, frozenset(called.get(c, ())))
               for c, n in counts.items()]
    samples[-1] = dataclasses.replace(samples[-1], holders={key: ("multi_opt_state",)})
    (g,) = growing(samples)
    assert not g.steady and g.repeated is None and g.held_by == "multi_opt_state"
    # the count is this group's, from the last sample before it rose (not call 2)
    assert (g.first_call, g.first_count, g.last_call, g.last_count) == (17, 0, 34, 48)
    # Three rises, each after a different function: no loop keeps them either.
    stairs = [GroupSample(c, {key: (n, 256)}, frozenset({c}))
              for c, n in ((1, 0), (2, 0), (3, 10), (4, 20), (5, 30))]
    assert not growing(stairs)[0].steady


# --- donation hazards ----------------------------------------------------------------

def test_the_donation_behind_a_deleted_array_is_named(tmp_path):
    report = _run(tmp_path, """
        import functools, jax, jax.numpy as jnp
        @functools.partial(jax.jit, donate_argnums=(0,))
        def update(state, g):
            return {"w": state["w"] - g}
        state = {"w": jnp.ones(4)}
        g = jnp.ones(4)
        state = update(state, g)
        old = state
        state = update(state, g)  # donates old
        assert old["w"].is_deleted()
        print(old["w"] + 1)
        """)
    assert report.run.outcome == "failed" and "deleted" in report.run.error
    d = report.deleted_read
    assert (d.function, d.path, d.call) == ("update", "state['w']", 2)
    assert d.line == f"{tmp_path / 'prog.py'}:{_line_of(tmp_path, 'donates old')}" or \
        d.line.endswith(f"prog.py:{_line_of(tmp_path, 'donates old')}")
    (finding,) = summarize(report).between
    assert finding.severity == "problem" and "was donated by update" in finding.text


def test_one_buffer_donated_twice_is_named_before_jax_refuses_it(tmp_path):
    report = _run(tmp_path, """
        import functools, jax, jax.numpy as jnp
        @functools.partial(jax.jit, donate_argnames=("a", "b"))
        def f(a, b):
            return a["p"] + 1, b + 1
        x = jnp.ones(4)
        f({"p": x}, b=x)
        """)
    assert report.run.outcome == "failed" and "twice" in report.run.error  # JAX's own error
    (hazard,) = report.donation_hazards
    assert (hazard.kind, hazard.function, hazard.call, hazard.paths) == (
        "donated_twice", "f", 1, ("a['p']", "b"))
    assert hazard.line.endswith(f":{_line_of(tmp_path, 'f({')}")
    text = " ".join(f.text for f in summarize(report).between)
    assert "a['p'] and b are one buffer, donated twice" in text


def test_a_donated_leaf_also_passed_undonated_is_named(tmp_path):
    report = _run(tmp_path, """
        import functools, jax, jax.numpy as jnp
        @functools.partial(jax.jit, donate_argnums=(0,))
        def f(a, b):
            return a + b
        x = jnp.ones(4)
        f(x, x)
        """)
    assert report.run.outcome == "failed" and "donated" in report.run.error
    (hazard,) = report.donation_hazards
    assert (hazard.kind, hazard.paths) == ("donated_and_passed", ("a", "b"))


def test_distinct_donated_buffers_are_no_hazard(tmp_path):
    report = _run(tmp_path, """
        import functools, jax, jax.numpy as jnp
        @functools.partial(jax.jit, donate_argnums=(0, 1))
        def f(a, b):
            return a + 1, b + 1
        x = jnp.ones(4)
        a, b = f(x, jnp.copy(x))
        assert x.is_deleted()
        """)
    assert report.run.outcome == "completed"
    assert report.donation_hazards == () and report.deleted_read is None


# --- the real-sized sample -----------------------------------------------------------

def test_transformer_adam_has_no_finding_between_calls():
    report = run_and_report(Script(str(SAMPLES / "transformer_adam.py"), ("--steps", "4")),
                            advise=False)
    assert report.run.outcome == "completed"
    (fn,) = report.functions
    assert fn.calls == 4 and fn.recompile is None and fn.compile_seconds > 0
    timeline = report.runtime.live_timeline
    assert timeline.growth == () and len(timeline.samples) >= 4
    assert timeline.samples[-1].count == report.runtime.live_arrays.count
    assert report.donation_hazards == () and report.deleted_read is None
    assert summarize(report).between == ()


# --- the report: JSON, terminal, check from the command line -------------------------

def test_between_findings_survive_json_and_fail_the_check_command(tmp_path):
    report = _run(tmp_path, LOOP % "losses.append(aux['loss'])", str(tmp_path / "live"))
    saved = tmp_path / "r.json"
    save_report(report, str(saved))
    again = load_report(str(saved))
    assert again == report and again.runtime.live_timeline.growth
    out = io.StringIO()
    render_report(again, out, width=100, plain=True)
    lines = out.getvalue().splitlines()
    at = lines.index("Between calls")
    assert lines[at + 1] == ("  problem: live arrays keep growing: train_step result[1]['loss']: "
                             f"float32[] on {DEVICE}: +1 array per")
    assert lines[at + 2].startswith("      call, 4 B each, ")
    page = io.StringIO()
    render_html(again, page)
    assert 'aria-label="live arrays over the run"' in page.getvalue()
    assert "+1 array per call" in page.getvalue()
    config = tmp_path / "memscope.toml"
    config.write_text('max_live_growth = "512 B"\n')
    result = CliRunner().invoke(cli, ["check", "--report", str(saved), "--config", str(config)])
    assert result.exit_code == 1, result.output
    assert "kept growing by" in result.output and "live arrays" in result.output
    config.write_text('max_live_growth = "1 MiB"\n')
    result = CliRunner().invoke(cli, ["check", "--report", str(saved), "--config", str(config)])
    assert result.exit_code == 0, result.output


def test_each_kind_of_difference_in_words():
    def leaf(path: str, **kw: object) -> LeafShape:
        base = {"kind": "array", "shape": (4,), "dtype": "float32", "weak_type": False,
                "placement": "cpu:0", "sharding": "cpu:0"}
        return LeafShape(path, **{**base, **kw})  # type: ignore[arg-type]

    def sig(*leaves: LeafShape, statics=(), tree="T", donation="no donation") -> SignatureShape:
        return SignatureShape(tuple(leaves), tuple(statics), tree, donation)

    then = sig(leaf("x"), leaf("lr", kind="float", shape=(), placement=None, sharding=None))
    now = sig(leaf("x", dtype="bfloat16"), leaf("lr", shape=()))
    kinds = [(r.path, r.kind) for r in signature_differences(then, now)]
    assert kinds == [("x", "dtype"), ("lr", "kind")]
    assert signature_differences(sig(leaf("x")), sig(leaf("x"), leaf("y"), tree="U"))[0].kind == "tree"
    (same,) = signature_differences(sig(leaf("x")), sig(leaf("x")))
    assert same.kind == "unknown" and "closure" in same.advice
    (spelled,) = signature_differences(sig(leaf("x", sharding="P() on x=8", placement=1)),
                             sig(leaf("x", sharding="P(None, None) on x=8", placement=1)))
    assert spelled.kind == "sharding_spelling"
    (donation,) = signature_differences(sig(leaf("x")), sig(leaf("x"), donation="donate_argnums=(0,)"))
    assert donation.kind == "donation"
    explained = explain([sig(leaf("x", shape=(2,))), sig(leaf("x", shape=(3,)))],
                        sig(leaf("x", shape=(3,), weak_type=True)))
    assert explained is not None and explained.since == 2
    assert [r.kind for r in explained.reasons] == ["weak_type"]


def test_a_deleted_array_passed_again_deep_in_a_pytree_is_traced_back(tmp_path):
    report = _run(tmp_path, """
        import functools, jax, jax.numpy as jnp
        @functools.partial(jax.jit, donate_argnames=("state",))
        def update(state, g):
            return jax.tree.map(lambda w: w - g, state)
        state = {"layers": [{"w": jnp.ones(4)}, {"w": jnp.ones(4)}]}
        kept = state
        state = update(state, jnp.ones(4))  # donates kept
        update(kept, jnp.ones(4))
        """)
    assert report.run.outcome == "failed"
    assert any(said in report.run.error for said in between._DELETED_MARKERS)
    d = report.deleted_read
    assert (d.function, d.call) == ("update", 1)
    assert d.path in ("state['layers'][0]['w']", "state['layers'][1]['w']")
    assert d.line.endswith(f"prog.py:{_line_of(tmp_path, 'donates kept')}")
