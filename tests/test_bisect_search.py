"""memscope bisect's pure parts: the search over releases (which it tries, the
moves it finds, the range it narrows to), the release order, what a program
needs beside JAX, and the passes read from XLA's dump. No environment is
built here: tests/test_bisect.py runs bisects end to end."""

from __future__ import annotations

from pathlib import Path

import pytest

from memscope.bisect import packages, releases
from memscope.bisect.child import dumped_passes
from memscope.bisect.search import MEMORY_FIGURES, Tried, moved, search_releases
from memscope.errors import MemscopeError

RELEASES = ["0.9.0", "0.9.0.1", "0.9.1", "0.9.2", "0.10.0", "0.10.1", "0.10.2"]


def figures(temp: int, peak: int | None = None) -> dict[str, int | None]:
    base = {f: 1000 for f in MEMORY_FIGURES}
    base.update(temp_bytes=temp, peak_bytes=peak if peak is not None else 2000 + temp)
    return base


class Program:
    """A fake program: its figures per release, releases that do not install
    or where it fails; counts what the search tried."""

    def __init__(self, temps: dict[str, int], *, fails: tuple[str, ...] = (),
                 not_installed: tuple[str, ...] = ()) -> None:
        self.temps, self.fails, self.not_installed = temps, fails, not_installed
        self.tried: list[str] = []

    def __call__(self, release: str) -> Tried:
        self.tried.append(release)
        if release in self.not_installed:
            return Tried(release, "not_installed", error="no wheel")
        if release in self.fails:
            return Tried(release, "failed", error="ImportError: cannot import name 'stack'")
        return Tried(release, "ran", {"step": figures(self.temps[release])})


def temps(moves: dict[str, int], start: int = 10_000) -> dict[str, int]:
    out, value = {}, start
    for r in RELEASES:
        value = moves.get(r, value)
        out[r] = value
    return out


def test_one_move_among_seven_releases_is_found_in_five_tries():
    program = Program(temps({"0.10.2": 12_000}))
    found = search_releases(RELEASES, program)
    assert [(m.function, m.previous, m.release) for m in found.moves] == [
        ("step", "0.10.1", "0.10.2")]
    assert found.moves[0].before["temp_bytes"] == 10_000
    assert found.moves[0].after["temp_bytes"] == 12_000
    assert len(program.tried) <= 5
    assert len(set(program.tried)) == len(program.tried)  # none tried twice


@pytest.mark.parametrize("where", RELEASES[1:])
def test_a_move_anywhere_is_found_within_log2_plus_two(where):
    program = Program(temps({where: 20_000}))
    found = search_releases(RELEASES, program)
    assert [(m.previous, m.release) for m in found.moves] == [
        (RELEASES[RELEASES.index(where) - 1], where)]
    assert len(program.tried) <= 5


def test_two_moves_of_one_function_are_each_said():
    program = Program(temps({"0.9.1": 15_000, "0.10.1": 30_000}))
    found = search_releases(RELEASES, program)
    assert [(m.previous, m.release) for m in found.moves] == [("0.9.0.1", "0.9.1"),
                                                              ("0.10.0", "0.10.1")]


def test_no_move_costs_the_two_ends():
    program = Program(temps({}))
    found = search_releases(RELEASES, program)
    assert found.moves == []
    assert sorted(program.tried) == ["0.10.2", "0.9.0"]


def test_a_change_under_the_threshold_is_no_move():
    program = Program(temps({"0.9.1": 10_050}))  # +0.5%
    assert search_releases(RELEASES, program).moves == []
    assert search_releases(RELEASES, Program(temps({"0.9.1": 10_050})), min_change=0.001).moves


def test_a_program_failing_on_the_older_releases_narrows_the_range():
    program = Program(temps({"0.10.2": 12_000}), fails=("0.9.0", "0.9.0.1", "0.9.1", "0.9.2"))
    found = search_releases(RELEASES, program)
    assert found.runs_on == ("0.10.0", "0.10.2")
    assert found.failing is not None and found.failing.release == "0.9.0"
    assert "stack" in (found.failing.error or "")
    assert [(m.previous, m.release) for m in found.moves] == [("0.10.1", "0.10.2")]


def test_a_program_failing_on_the_newer_releases_narrows_the_range():
    # an API the program uses was removed in 0.10.1
    program = Program(temps({"0.9.1": 12_000}), fails=("0.10.1", "0.10.2"))
    found = search_releases(RELEASES, program)
    assert found.runs_on == ("0.9.0", "0.10.0")
    assert found.failing is None
    assert found.failing_newer is not None and found.failing_newer.release == "0.10.2"
    assert [(m.previous, m.release) for m in found.moves] == [("0.9.0.1", "0.9.1")]


def test_a_program_failing_at_both_ends_is_bisected_where_it_runs():
    program = Program(temps({"0.9.2": 12_000}), fails=("0.9.0", "0.10.2"))
    found = search_releases(RELEASES, program)
    assert found.runs_on == ("0.9.0.1", "0.10.1")
    assert [(m.previous, m.release) for m in found.moves] == [("0.9.1", "0.9.2")]


def test_a_program_failing_everywhere_tried_has_no_range():
    program = Program(temps({}), fails=tuple(RELEASES))
    found = search_releases(RELEASES, program)
    assert found.moves == [] and found.runs_on is None
    assert found.failing is not None and len(program.tried) <= 3


def test_a_release_that_does_not_install_is_stepped_over():
    program = Program(temps({"0.10.1": 12_000}), not_installed=("0.10.0", "0.10.2"))
    found = search_releases(RELEASES, program)
    assert [(m.previous, m.release) for m in found.moves] == [("0.9.2", "0.10.1")]
    assert found.moves[0].untried == ("0.10.0",)


def test_a_function_that_appears_is_a_move():
    class Appears(Program):
        def __call__(self, release):
            tried = super().__call__(release)
            if releases.key(release) >= releases.key("0.9.2"):
                tried.functions["new_step"] = figures(5)
            return tried

    found = search_releases(RELEASES, Appears(temps({})))
    assert [(m.function, m.release) for m in found.moves] == [("new_step", "0.9.2")]
    assert found.moves[0].before == {}


def test_moved_is_relative_to_the_larger_value():
    assert not moved(100, 100, 0.01)
    assert moved(100, 102, 0.01)
    assert not moved(1000, 1005, 0.01)
    assert moved(0, 4, 0.01)  # from nothing
    assert moved(None, 4, 0.01) and not moved(None, None, 0.01)


def test_releases_order_and_range():
    assert sorted(["0.10.0", "0.9.0.1", "0.9.0", "0.9.1"], key=releases.key) == [
        "0.9.0", "0.9.0.1", "0.9.1", "0.10.0"]
    chosen = releases.Range.parse("0.9.0..0.10.2").select(
        [*RELEASES, "0.8.3", "0.11.0", "0.10.3rc1", "0.12.0.dev20260101"])
    assert chosen == RELEASES
    for bad in ("0.9.0", "0.10..0.9", "0.10.2..0.9.0", "a..b"):
        with pytest.raises(MemscopeError):
            releases.Range.parse(bad)
    assert releases.companion("0.9.0.1", RELEASES) == "0.9.0.1"
    assert releases.companion("0.5.2", ["0.5.0", "0.5.1", "0.5.3"]) == "0.5.1"


def test_what_a_program_needs_beside_jax(tmp_path: Path):
    (tmp_path / "helpers.py").write_text("import optax\n")
    (tmp_path / "train.py").write_text(
        "import os, json\nimport jax\nimport flax.nnx as nnx\nfrom helpers import x\n")
    assert packages.imported_modules(str(tmp_path / "train.py"), False) == {
        "jax", "flax", "optax"}
    found = packages.carried(str(tmp_path / "train.py"), False)
    assert {"flax", "optax", "click", "rich"} <= set(found.versions)  # memscope's own too
    assert not {"jax", "jaxlib", "jax-memscope", "memscope"} & set(found.versions)
    assert {"flax", "optax"} <= found.need_jax
    assert "click" not in found.need_jax


def test_passes_are_read_from_the_dump_in_the_order_they_ran(tmp_path: Path):
    for name in ("module_0036.jit_train_step.0000.cpu.after_pipeline-start.before_dce.txt",
                 "module_0036.jit_train_step.0012.simp.after_algsimp.before_cse.txt",
                 "module_0036.jit_train_step.0003.spmd.after_dce.before_algsimp.txt",
                 "module_0036.jit_train_step.0020.simp.after_algsimp.before_fusion.txt",
                 "module_0036.jit_train_step.cpu_after_optimizations.txt"):
        (tmp_path / name).write_text("")
    assert dumped_passes(str(tmp_path)) == ["dce", "algsimp"]


def test_progress_names_the_release_and_the_releases_tried_of_about_how_many(tmp_path: Path):
    from memscope.bisect.run import Request, Runner
    from memscope.program.runner import Script
    from memscope.progress import ProgressStep

    program = tmp_path / "train.py"
    program.write_text("import jax\n")
    steps: list[ProgressStep] = []
    runner = Runner(Request(Script(str(program), ()), "jax",
                            releases.Range.parse("0.9.0..0.10.2")),
                    tmp_path / "work", steps.append, expected=2)
    runner.say("0.9.0", "building an environment for jax 0.9.0 with Python 3.12")
    runner.tried_so_far += ["0.9.0", "0.10.2"]
    runner.say("0.9.2", "running the program under memscope")  # more than expected
    assert steps == [
        ProgressStep("JAX 0.9.0: building an environment for jax 0.9.0 with Python 3.12", 0, 2,
             about=True),
        ProgressStep("JAX 0.9.2: running the program under memscope", 2, 3, about=True)]
