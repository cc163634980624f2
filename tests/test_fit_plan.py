"""``memscope fit --plan``: each setting's batch is checked against JAX's own
compiles of the step written with that setting by hand (``jax.checkpoint``
with the policy from ``jax.checkpoint_policies``, ``donate_argnames``): the
batch fits the budget by memscope's peak rule and one step more does not; a
row stopped early does not fit the size it names; the winner is the largest
batch, of equal batches the fewest FLOPs; the code it prints, evaluated, is
the step it measured."""

from __future__ import annotations

import dataclasses
import json
import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import pytest
from click.testing import CliRunner

from memscope import _compat
from memscope.cli import cli
from memscope.render.plan import (
    PLAN_SCHEMA,
    render_plan_html,
    render_plan_json,
    render_plan_markdown,
    render_plan_text,
)
from memscope.report import FitPlan, PlanPoint, PlanRow, peak_rule
from tests.support.cli import MEMSCOPE
from tests.support.samples import sample_module

PROGRAM = Path(__file__).parent / "programs" / "plan_mlp.py"
BUDGET = "4MiB"
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


def _plan(cache: Path, *args: str) -> tuple[int, dict[str, Any]]:
    env = {**os.environ, "PYTHONWARNINGS": "ignore", "MEMSCOPE_CACHE": "on",
           "MEMSCOPE_CACHE_DIR": str(cache)}
    done = subprocess.run([MEMSCOPE, "fit", "--plan", "--format", "json", *args],
                          capture_output=True, text=True, env=env, timeout=900)
    return done.returncode, json.loads(done.stdout) if done.stdout else {"stderr": done.stderr}


@pytest.fixture(scope="module")
def planned(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Any], dict[str, Any]]:
    """The plan, and the same plan asked again (its compiles read from the cache)."""
    cache = tmp_path_factory.mktemp("cache")
    code, first = _plan(cache, "--memory", BUDGET, str(PROGRAM))
    assert code == 0, first
    code, again = _plan(cache, "--memory", BUDGET, str(PROGRAM))
    assert code == 0, again
    return first, again


# ------------------------------------------------- the step, by hand --


def _policy(name: str) -> Any:
    policies = jax.checkpoint_policies
    if name == "save_only_these_names":
        return policies.save_only_these_names("hidden")
    if name == "offload_dot_with_no_batch_dims":
        return policies.offload_dot_with_no_batch_dims("device", "pinned_host")
    if name == "save_and_offload_only_these_names":
        return policies.save_and_offload_only_these_names(
            names_which_can_be_saved=[], names_which_can_be_offloaded=["hidden"],
            offload_src="device", offload_dst="pinned_host")
    return getattr(policies, name)


def _step(row: dict[str, Any]) -> Any:
    """The program's step with ``row``'s setting, written by hand."""
    mlp = sample_module(PROGRAM.stem, PROGRAM)
    policy = row["setting"].removesuffix(" + advised donation")
    loss = (mlp.loss_fn if row["kind"] in ("written", "donation")
            else jax.checkpoint(mlp.loss_fn, policy=_policy(policy)))

    def step(params, x):
        value, grads = jax.value_and_grad(loss)(params, x)
        return [p - 0.1 * g for p, g in zip(params, grads, strict=True)], value

    donate = ("params",) if row["kind"] in ("donation", "combined") else ()
    return jax.jit(step, donate_argnames=donate)


def _compiled(row: dict[str, Any], batch: int) -> Any:
    mlp = sample_module(PROGRAM.stem, PROGRAM)
    params = jax.eval_shape(mlp.init, jax.random.key(0))
    x = jax.ShapeDtypeStruct((batch, mlp.WIDTH), jnp.float32)
    return _step(row).lower(params, x).compile()


def _peak(compiled: Any) -> int:
    stats = compiled.memory_analysis()
    return peak_rule(stats.argument_size_in_bytes, stats.output_size_in_bytes,
                     stats.alias_size_in_bytes, stats.temp_size_in_bytes,
                     getattr(stats, "peak_memory_in_bytes", None))[0]


# ---------------------------------------------------------- the plan --


def test_each_rows_batch_fits_and_one_step_more_does_not(planned):
    plan, _ = planned
    assert plan["schema"] == PLAN_SCHEMA and plan["function"] == "step"
    budget, step = plan["budget_bytes"], plan["step"]
    rows = {r["setting"]: r for r in plan["rows"]}
    searched = [r for r in plan["rows"] if r["largest"] is not None]
    # as written, the donation, a policy at least, and the best policy with the donation
    assert {"written", "donation", "policy", "combined"} <= {r["kind"] for r in searched}
    for r in searched:
        at = _compiled(r, r["largest"])
        assert _peak(at) == r["peak_bytes"] <= budget, r["setting"]
        assert _peak(_compiled(r, r["largest"] + step)) == r["over_bytes"] > budget, r["setting"]
        assert r["flops_per_example"] == pytest.approx(_compat.executables.flops(at) / r["largest"])
    for r in plan["rows"]:
        if r["below"] is not None:  # stopped: it cannot fit the size another fits
            assert r["largest"] is None and _peak(_compiled(r, r["below"])) > budget
            assert r["below"] <= max(s["largest"] for s in searched)
    assert rows["as written"]["largest"] is not None  # the baseline is always exact


def test_the_winner_is_the_largest_batch_then_the_fewest_flops(planned):
    plan, _ = planned
    searched = [r for r in plan["rows"] if r["largest"] is not None]
    best = max(r["largest"] for r in searched)
    tied = [r for r in searched if r["largest"] == best]
    winner = plan["rows"][0]
    assert plan["winner"] == winner["setting"] and winner["largest"] == best
    assert winner["flops_per_example"] == min(r["flops_per_example"] for r in tied)
    # best first: rows with a batch by the batch, then the stopped, then the rest
    order = [(0, -r["largest"]) if r["largest"] is not None else
             (1, -r["below"]) if r["below"] is not None else (2, 0) for r in plan["rows"]]
    assert order == sorted(order)
    # FLOPs at the captured batch against the program as written there
    written = next(r for r in plan["rows"] if r["kind"] == "written")
    assert written["flops_ratio"] == 1.0
    nothing = next(r for r in plan["rows"] if r["setting"] == "nothing_saveable")
    assert nothing["flops_ratio"] > 1.0  # it recomputes the forward pass


def test_the_winners_code_is_the_step_it_measured(planned):
    plan, _ = planned
    winner = plan["rows"][0]
    assert winner["kind"] == "combined", plan["winner"]
    policy_code, _, jit_code = plan["winner_code"].partition("; jax.jit(..., ")
    mlp = sample_module(PROGRAM.stem, PROGRAM)
    grad = eval(policy_code, {"jax": jax, "loss_fn": mlp.loss_fn})
    options = eval(f"dict({jit_code.removesuffix(')')})")

    def step(params, x):
        value, grads = grad(params, x)
        return [p - 0.1 * g for p, g in zip(params, grads, strict=True)], value

    params = jax.eval_shape(mlp.init, jax.random.key(0))
    x = jax.ShapeDtypeStruct((winner["largest"], mlp.WIDTH), jnp.float32)
    assert _peak(jax.jit(step, **options).lower(params, x).compile()) == winner["peak_bytes"]


@pytest.mark.xla_cpu("it compiles no host offload, so fit's offload rows say why")
def test_offload_rows_on_xla_cpu_say_why_and_are_not_searched(planned):
    plan, _ = planned
    for name in ("offload_dot_with_no_batch_dims", "save_and_offload_only_these_names"):
        row = next(r for r in plan["rows"] if r["setting"] == name)
        assert row["largest"] is None and "XLA:CPU compiles no host offload" in row["note"]
        # the ground truth: the step compiled with the policy holds no host memory
        stats = _compiled(row, plan["batch"]).memory_analysis()
        assert stats.host_temp_size_in_bytes == 0 and row["points"][0]["host_bytes"] == 0


def test_asked_again_the_plan_compiles_nothing_and_says_the_same(planned):
    first, again = planned
    assert first["compiles"] > 0 and again["compiles"] == 0
    assert again["cached"] == first["compiles"] + first["cached"]

    def facts(p: dict[str, Any]) -> list[tuple[Any, ...]]:
        return [(r["setting"], r["largest"], r["peak_bytes"], r["below"], r["flops_ratio"])
                for r in p["rows"]]

    assert facts(first) == facts(again)


def test_a_step_that_differentiates_nothing_has_rows_that_say_so(tmp_path):
    script = tmp_path / "infer.py"
    script.write_text("import jax, jax.numpy as jnp\n"
                      "f = jax.jit(lambda w, x: jnp.tanh(x @ w).sum(0))\n"
                      "w = jnp.ones((64, 64))\n"
                      "for _ in range(2):\n    f(w, jnp.ones((32, 64)))\n")
    code, plan = _plan(tmp_path / "cache", "--memory", "1MiB", "--batch", "1", str(script))
    assert code == 0, plan
    rows = {r["setting"]: r for r in plan["rows"]}
    assert rows["as written"]["largest"] == plan["rows"][0]["largest"]
    for name in ("nothing_saveable", "save_only_these_names", "offload_dot_with_no_batch_dims"):
        assert "differentiates nothing" in rows[name]["note"], name
    assert rows["best policy + advised donation"]["largest"] is None


def test_markdown_and_html_are_the_plans_and_only_with_plan():
    runner = CliRunner()
    done = runner.invoke(cli, ["fit", "--format", "html", str(PROGRAM)])
    assert done.exit_code == 2 and "--plan" in done.output


# ------------------------------------------------------- the renderers --


def _fixture_plan() -> FitPlan:
    rows = (
        PlanRow("nothing_saveable + advised donation", "combined",
                'jax.value_and_grad(jax.checkpoint(loss_fn, policy=jax.checkpoint_policies.'
                'nothing_saveable)); jax.jit(..., donate_argnames=("params",))', 629,
                peak_bytes=4_193_000, over_bytes=4_200_000, host_bytes=0,
                flops_per_example=466_000.0, flops_ratio=1.27, compiles=3,
                points=(PlanPoint(256, 2_000_000, 0, 1.2e8),)),
        PlanRow("as written", "written", None, 551, peak_bytes=4_190_000, over_bytes=4_197_000,
                host_bytes=0, flops_per_example=368_000.0, flops_ratio=1.0, compiles=4),
        PlanRow("dots_saveable", "policy", "jax.value_and_grad(...)", None, below=629,
                flops_ratio=1.01, note="stopped: at batch 629, ...", compiles=2),
        PlanRow("offload_dot_with_no_batch_dims", "offload", "x", None,
                note="the step holds no host memory", compiles=1),
    )
    return FitPlan(function="step", source="plan_mlp.py:30", argument="x", axis=0, batch=256,
                   step=1, budget_bytes=4 << 20, rows=rows,
                   winner="nothing_saveable + advised donation", winner_code=rows[0].code,
                   compiles=12, seconds=2.5, cached=2)


def test_text_puts_the_winner_first_then_one_row_per_setting():
    import io

    out = io.StringIO()
    render_plan_text(_fixture_plan(), out)
    lines = out.getvalue().splitlines()
    assert lines[0] == "memscope fit --plan: step (plan_mlp.py:30)"
    assert lines[2] == ("Best: nothing_saveable + advised donation: batch 629 (as written: "
                        "551), FLOPs 1.27x the program as written at batch 256")
    assert lines[3].strip().startswith("jax.value_and_grad(jax.checkpoint(loss_fn")
    table = lines[lines.index("") + 1:]
    assert table[:5] == [
        "setting                              batch  peak at batch  FLOPs/example  "
        "FLOPs vs written  host at batch",
        "nothing_saveable + advised donation    629      3.999 MiB       4.66e+05  "
        "           1.27x            0 B",
        "as written                             551      3.996 MiB       3.68e+05  "
        "           1.00x            0 B",
        "dots_saveable                        < 629            n/a            n/a  "
        "           1.01x            n/a",
        "offload_dot_with_no_batch_dims         n/a            n/a            n/a  "
        "             n/a            n/a"]
    assert "notes:" in lines and lines[-1].startswith("12 compiles (2 more read from")


def test_json_markdown_and_html_render_the_same_plan(tmp_path):
    import io

    p = _fixture_plan()
    out = io.StringIO()
    render_plan_json(p, out, outcome="stopped")
    data = json.loads(out.getvalue())
    assert data["schema"] == PLAN_SCHEMA and data["program_outcome"] == "stopped"
    assert [r["setting"] for r in data["rows"]] == [r.setting for r in p.rows]
    assert data["rows"][0] == json.loads(json.dumps(dataclasses.asdict(p.rows[0])))
    md = io.StringIO()
    render_plan_markdown(p, md)
    text = md.getvalue()
    assert "**Best: nothing\\_saveable + advised donation: batch 629" in text
    assert text.count("\n| ") == 1 + len(p.rows)  # the header and one line per setting
    page = tmp_path / "plan.html"
    with page.open("w") as f:
        render_plan_html(p, f)
    html = page.read_text()
    assert "<script" not in html and html.count("<tr class=") == len(p.rows)
    if CHROMIUM is None:
        pytest.skip("chromium is not installed (.ci/run installs it)")
    done = subprocess.run([CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu",
                           f"--user-data-dir={tmp_path / 'profile'}", "--dump-dom",
                           page.as_uri()], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.count("<tr class=") == len(p.rows)
    assert 'class="winner"' in done.stdout and "629" in done.stdout


def test_a_step_whose_flops_do_not_grow_with_the_batch_is_said():
    """MaxText's loss slices its data to the configured batch: resizing the data
    buys input bytes, not examples (seen with MaxText 0.2.5: 1.00x the FLOPs from
    batch 2 to 20969). The plan says so; a step that grows with the batch is not named."""
    from memscope.variants.plan import _compute_note

    def written(*points: tuple[int, float]) -> PlanRow:
        return PlanRow("as written", "written", None, points[-1][0],
                       points=tuple(PlanPoint(b, 1, 0, f) for b, f in points))

    note = _compute_note(written((2, 1e6), (4, 1.0e6), (20969, 1.01e6)))
    assert note is not None and "1.01x from batch 2 to 20969" in note
    assert _compute_note(written((2, 1e6), (4, 2e6), (20969, 1.05e10))) is None
    assert _compute_note(written((2, 1e6))) is None


def test_a_step_as_written_that_fails_at_another_size_is_bad_input(tmp_path):
    """As ``fit``: exit 2 and one line naming the size, not "nothing fits"."""
    script = tmp_path / "fixed.py"
    script.write_text("import jax, jax.numpy as jnp\n"
                      "def loss(w, x):\n    return jnp.tanh(x.reshape(4, 8, 16) @ w).sum()\n"
                      "step = jax.jit(lambda w, x: w - 0.1 * jax.grad(loss)(w, x))\n"
                      "w = jnp.ones((16, 16))\n"
                      "for _ in range(2):\n    w = step(w, jnp.ones((32, 16)))\n")
    env = {**os.environ, "PYTHONWARNINGS": "ignore", "MEMSCOPE_CACHE": "off"}
    done = subprocess.run([MEMSCOPE, "fit", "--plan", "--memory", "1MiB", str(script)],
                          capture_output=True, text=True, env=env, timeout=600)
    assert done.returncode == 2 and done.stdout == "", done.stderr
    (line,) = [x for x in done.stderr.splitlines() if x.startswith("memscope:")]
    assert line.startswith("memscope: error: <lambda> does not trace at batch 64"), line


def test_the_plan_tells_each_compile_as_it_begins():
    """Each (setting, batch) the plan compiled is told once, with the function and
    the target, and nothing it did not compile; the first round counts its
    compiles side by side up to all of them."""
    from memscope.flow import run_fit
    from memscope.program.runner import Script
    from memscope.progress import ProgressStep

    steps: list[ProgressStep] = []
    done = run_fit(Script(str(PROGRAM), ("--batch", "32")), memory=4 << 20, plan=True,
                   progress=steps.append)
    assert done.plan is not None
    told = re.compile(r"compiling step (as written|with (.+)) at batch (\d+) for this machine")
    compiled = [(m.group(2) or m.group(1), int(m.group(3)))
                for s in steps if (m := told.fullmatch(s.what))]
    names = {"the advised donation": "advised donation"}
    assert sorted((names.get(n, n), b) for n, b in compiled) == sorted(
        (r.setting, p.batch) for r in done.plan.rows for p in r.points)
    together = [s for s in steps if "settings at batch 32 for this machine, side by" in s.what]
    assert [s.done for s in together] == list(range(together[0].total + 1))
    assert steps[-1].total is not None and steps[-1].done < steps[-1].total
