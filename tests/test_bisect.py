"""memscope bisect end to end: environments built from the package index with
uv, the program run under memscope in each, held to each release's own
compile in environments this test builds itself.

The pair: tests/programs/bisect_transformer.py's train step (layers under
lax.scan, each checkpointed with nothing_saveable) has more temporaries on
JAX 0.10.2 than on 0.10.1 (found by compiling it on every release from 0.9.0
to 0.10.2: XLA:CPU's dot-library-rewriter), and the same on 0.10.0 and 0.10.1.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from memscope.bisect.environments import uv
from tests.support.cli import MEMSCOPE
from tests.support.samples import ROOT

PROGRAMS = ROOT / "tests" / "programs"
FIGURES = ("argument_bytes", "output_bytes", "alias_bytes", "temp_bytes", "peak_bytes")

TRUTH = """
import importlib.util, json, sys
spec = importlib.util.spec_from_file_location("program", sys.argv[1])
program = importlib.util.module_from_spec(spec)
spec.loader.exec_module(program)
import jax
m = program.train_step.lower(program.init(jax.random.key(0)), program.batch(0)).compile(
    ).memory_analysis()
a, o, al, t = (m.argument_size_in_bytes, m.output_size_in_bytes, m.alias_size_in_bytes,
               m.temp_size_in_bytes)
xla = getattr(m, "peak_memory_in_bytes", None)
# memscope's peak (docs/report-format.md): the larger of XLA's and the sum
print(json.dumps({"jax": jax.__version__, "argument_bytes": a, "output_bytes": o,
                  "alias_bytes": al, "temp_bytes": t,
                  "peak_bytes": max(xla or 0, a + o - al + t)}))
"""


@pytest.fixture(scope="module")
def environments(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("environments")


def _memscope(*args: str, environments: Path, cwd: Path = ROOT, temp: Path | None = None
              ) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "COLUMNS": "120", "MEMSCOPE_ENVIRONMENTS_DIR": str(environments)}
    if temp is not None:
        env["TMPDIR"] = str(temp)
    return subprocess.run([MEMSCOPE, "bisect", *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=900)


def _truth(release: str, folder: Path) -> dict[str, int]:
    """The program's step compiled by JAX ``release`` itself, in an environment
    of this test's own."""
    env = folder / f"truth-{release}"
    base = getattr(sys, "_base_executable", sys.executable)
    quiet = {**os.environ, "UV_PYTHON_DOWNLOADS": "never"}
    subprocess.run([*uv(), "venv", "-q", "-p", base, str(env)], check=True, env=quiet)
    subprocess.run([*uv(), "pip", "install", "-q", "-p", str(env / "bin" / "python"),
                    f"jax=={release}", f"jaxlib=={release}"], check=True, env=quiet)
    done = subprocess.run([str(env / "bin" / "python"), "-c", TRUTH,
                           str(PROGRAMS / "bisect_transformer.py")],
                          capture_output=True, text=True, check=True,
                          env={**os.environ, "JAX_PLATFORMS": "cpu"})
    found = json.loads(done.stdout.strip().splitlines()[-1])
    assert found["jax"] == release
    return {f: found[f] for f in FIGURES}


@pytest.fixture(scope="module")
def bisected(environments, tmp_path_factory):
    folder = tmp_path_factory.mktemp("bisect")
    out = folder / "b.json"
    temp = folder / "temp"
    temp.mkdir()
    run = _memscope("--jax", "0.10.1..0.10.2", "-o", str(out),
                    "tests/programs/bisect_transformer.py", environments=environments,
                    temp=temp)
    assert run.returncode == 0, run.stderr[-3000:]
    # each run's report and log are kept, memscope's copy of itself is not
    (work,) = temp.glob("memscope-bisect-*")
    assert {"0.10.1.log", "0.10.2.log"} <= {p.name for p in work.glob("*.log")}
    assert not (work / "memscope-code").exists()
    return run, json.loads(out.read_text()), folder


def test_the_move_is_named_with_both_releases_and_held_to_their_own_compiles(bisected):
    run, found, folder = bisected
    assert run.stdout.startswith("train_step's peak moved between JAX 0.10.1 and 0.10.2: "), \
        run.stdout[:400]
    [move] = found["first_moved"]
    assert (move["function"], move["previous"], move["release"]) == (
        "train_step", "0.10.1", "0.10.2")
    assert {f: move["before"][f] for f in FIGURES} == _truth("0.10.1", folder)
    assert {f: move["after"][f] for f in FIGURES} == _truth("0.10.2", folder)
    assert move["after"]["temp_bytes"] > move["before"]["temp_bytes"]
    # each release tried gives the figures of its own compile, JAX and jaxlib at it
    for tried in found["tried"]:
        assert tried["status"] == "ran"
        assert tried["installed"] == {"jax": tried["release"], "jaxlib": tried["release"]}
        [fn] = tried["functions"]
        assert fn["function"].startswith("train_step (")
        side = move["before"] if tried["release"] == "0.10.1" else move["after"]
        assert {f: fn[f] for f in (*FIGURES, "peak_rule")} == side


def test_the_move_is_explained_by_the_programs_source_lines(bisected):
    run, found, _ = bisected
    [move] = found["first_moved"]
    changes = move["changes"]
    assert changes, move
    # what changed at the peak adds up to the peak's change, each part at a line
    assert sum(c["bytes"] for c in changes) == move["peak_after"] - move["peak_before"]
    assert all(c["where"] and c["where"].startswith("tests/programs/bisect_transformer.py:")
               for c in changes)
    assert "JAX 0.10.1 -> 0.10.2" in run.stdout
    assert "by the buffers that changed:" in run.stdout
    first = next(c for c in changes if c["bytes"])
    assert first["where"] in run.stdout


def test_the_pass_that_made_the_move_is_named(bisected):
    run, found, _ = bisected
    [move] = found["first_moved"]
    passes = move["passes"]
    # XLA:CPU's dot-library-rewriter (new in JAX 0.10.2): with it disabled, 0.10.2
    # compiles the step to 0.10.1's figures
    assert passes["found"] == ["dot-library-rewriter"], passes
    assert passes["tried"] >= 10 and passes["candidates"] >= passes["tried"]
    assert "XLA pass: with dot-library-rewriter disabled" in run.stdout


def test_the_json_fields(bisected):
    _, found, _ = bisected
    assert found["schema"] == "memscope.bisect/1"
    assert found["package"] == "jax" and found["range"] == "0.10.1..0.10.2"
    assert found["releases"] == ["0.10.1", "0.10.2"]
    assert [t["release"] for t in found["tried"]] == ["0.10.1", "0.10.2"]
    assert found["environments_built"] + found["environments_reused"] == 2
    [move] = found["first_moved"]
    assert set(move) >= {"function", "release", "previous", "before", "after", "changes"}
    for side in ("before", "after"):
        assert set(move[side]) == {*FIGURES, "peak_rule"}
        assert move[side]["peak_rule"] in ("xla", "sum")  # which rule gave the peak
    assert set(move["changes"][0]) >= {"role", "where", "bytes"}
    # the temporaries per source line that changed, each at one of the program's lines
    assert move["temporaries_by_source"], move
    assert all(t["where"] is None or "bisect_transformer.py:" in t["where"]
               for t in move["temporaries_by_source"])


def test_a_run_again_builds_no_environment(bisected, environments, tmp_path):
    out = tmp_path / "again.json"
    again = _memscope("--jax", "0.10.1..0.10.2", "--no-passes", "-o", str(out),
                      "tests/programs/bisect_transformer.py", environments=environments)
    assert again.returncode == 0, again.stderr[-3000:]
    found = json.loads(out.read_text())
    assert (found["environments_built"], found["environments_reused"]) == (0, 2)
    assert found["first_moved"][0]["after"] == bisected[1]["first_moved"][0]["after"]
    assert "building an environment" not in again.stderr


def test_a_program_that_fails_on_an_older_release_narrows_the_range(environments, tmp_path):
    out = tmp_path / "narrowed.json"
    run = _memscope("--jax", "0.10.0..0.10.2", "--no-passes", "-o", str(out),
                    "tests/programs/bisect_newer_api.py", environments=environments)
    assert run.returncode == 0, run.stderr[-3000:]
    found = json.loads(out.read_text())
    assert found["runs_on"] == ["0.10.1", "0.10.2"]
    failed = next(t for t in found["tried"] if t["release"] == "0.10.0")
    assert failed["status"] == "failed" and "stack" in failed["error"], failed
    assert [(m["previous"], m["release"]) for m in found["first_moved"]] == [("0.10.1", "0.10.2")]
    assert "range narrowed to 0.10.1..0.10.2: the program fails on JAX 0.10.0" in run.stdout


def test_a_framework_bisected_with_jax_fixed(environments, tmp_path):
    import equinox
    import jax

    out = tmp_path / "equinox.json"
    run = _memscope("--package", "equinox", "0.13.7..0.13.8", "-o", str(out),
                    "sample_programs/equinox_train.py", environments=environments)
    assert run.returncode == 0, run.stderr[-3000:]
    found = json.loads(out.read_text())
    assert found["package"] == "equinox"
    assert [t["release"] for t in found["tried"]] == ["0.13.7", "0.13.8"]
    for tried in found["tried"]:
        assert tried["status"] == "ran", tried
        assert tried["installed"]["equinox"] == tried["release"]
        assert tried["installed"]["jax"] == jax.__version__  # the user's JAX, fixed
    # the installed equinox's figures here are the same release's there
    here = subprocess.run([MEMSCOPE, "run", "-q", "--no-advice", "-o", str(tmp_path / "r.json"),
                           "sample_programs/equinox_train.py"], cwd=ROOT, capture_output=True,
                          text=True, timeout=600)
    assert here.returncode == 0, here.stderr
    mine = json.loads((tmp_path / "r.json").read_text())["functions"][0]["memory"]
    same = next(t for t in found["tried"] if t["release"] == equinox.__version__)
    assert {f: same["functions"][0][f] for f in FIGURES} == {f: mine[f] for f in FIGURES}
    # a framework's move is no XLA pass's: none is asked of XLA
    assert all(m["passes"] is None for m in found["first_moved"])


def test_a_framework_release_the_users_jax_cannot_run_narrows_the_range(environments,
                                                                        tmp_path):
    # optax 0.2.7 reads a JAX setting that JAX 0.12 no longer has
    import jax

    if jax.__version_info__[:2] < (0, 12):
        pytest.skip("optax 0.2.7 runs on this JAX")
    out = tmp_path / "optax.json"
    run = _memscope("--package", "optax", "0.2.7..0.2.8", "--no-passes", "-o", str(out),
                    "tests/programs/bisect_optax.py", environments=environments)
    assert run.returncode == 0, run.stderr[-3000:]
    found = json.loads(out.read_text())
    failed = found["tried"][0]
    assert (failed["release"], failed["status"]) == ("0.2.7", "failed")
    assert "jax_pmap_shmap_merge" in failed["error"]
    assert found["runs_on"] == ["0.2.8", "0.2.8"]
    assert "range narrowed to 0.2.8..0.2.8: the program fails on optax 0.2.7" in run.stdout


@pytest.mark.parametrize("args, says", [
    ((), "give the releases to bisect"),
    (("--jax", "0.10.2..0.10.1"), "runs backwards"),
    (("--jax", "0.10"), "a range of releases is FROM..TO"),
    (("--jax", "0.10.1..0.10.2", "--min-change", "5"), "not a percentage"),
])
def test_bad_input_is_one_line_and_exit_2(args, says, environments):
    run = _memscope(*args, "tests/programs/bisect_transformer.py", environments=environments)
    assert run.returncode == 2, run
    assert says in run.stderr and len(run.stderr.strip().splitlines()) == 1, run.stderr


def test_check_against_a_baseline_of_another_jax_names_the_release_that_moved_it(
        bisected, environments, tmp_path):
    # memscope's own environments for the two releases (built by the bisect above):
    # the baseline taken on JAX 0.10.1, the check run on 0.10.2
    older, newer = (next(environments.glob(f"jax-{r}-*")) for r in ("0.10.1", "0.10.2"))
    baseline = tmp_path / "baseline.json"
    env = {**os.environ, "COLUMNS": "120", "MEMSCOPE_ENVIRONMENTS_DIR": str(environments),
           "PATH": f"{newer / 'bin'}{os.pathsep}{os.environ['PATH']}"}
    made = subprocess.run([str(older / "bin" / "python"), "-m", "memscope", "run", "-q",
                           "-o", str(baseline), "tests/programs/bisect_transformer.py"],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert made.returncode == 0, made.stderr
    assert json.loads(baseline.read_text())["environment"]["jax"] == "0.10.1"

    def check(*more: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([str(newer / "bin" / "python"), "-m", "memscope", "check",
                               "--baseline", str(baseline), *more,
                               "tests/programs/bisect_transformer.py"],
                              cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)

    plain = check()
    assert plain.returncode == 1, plain.stdout
    assert "jax 0.10.1 -> 0.10.2" in plain.stdout
    assert "memscope check --bisect names the JAX release" in plain.stdout
    assert "--bisect:" not in plain.stdout

    bisected_check = check("--bisect")
    assert bisected_check.returncode == 1, bisected_check.stdout  # still a regression
    said = bisected_check.stdout[bisected_check.stdout.index("--bisect: "):]
    assert said.startswith("--bisect: train_step's peak moved between JAX 0.10.1 and 0.10.2: "
                           "peak +"), said
    assert "memscope bisect --jax 0.10.1..0.10.2 explains each move" in said
    assert "building an environment" not in bisected_check.stderr  # both were kept


def test_a_release_no_python_here_installs_is_one_line(tmp_path, monkeypatch):
    # JAX 0.11 installs on Python 3.12 and later only: offered 3.11 alone, uv says why
    from memscope.bisect import environments, packages, pythons

    old = [p for p in pythons.pythons() if p.version[:2] == (3, 11)]
    if not old:
        pytest.skip("no Python 3.11 on this machine")
    monkeypatch.setenv("MEMSCOPE_ENVIRONMENTS_DIR", str(tmp_path))
    with pytest.raises(environments.NotInstalled) as caught:
        environments.ensure([("jax", "0.11.0"), ("jaxlib", "0.11.0")],
                            packages.Carried({}, frozenset()), pythons=old)
    line = str(caught.value)
    assert line.startswith("jax 0.11.0 could not be installed: Because the current Python "
                           "version (3.11"), line
    assert "\n" not in line
    assert not any(tmp_path.glob("jax-0.11.0-*"))  # nothing half-built is kept
