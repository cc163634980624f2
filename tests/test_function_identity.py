"""Which function a captured call belongs to: a jitted function is the jit call
that made it (its line in the user's code), not the code object it wraps.

Two closures of one factory jitted at two lines are two functions; a Haiku
``transform(f).apply`` (a closure Haiku's factory makes for every model) jitted
by the user is named at the user's jit line and advised as the user's own; and
a ``--target``'s compile of a call holds what it needs (the lowering, never the
program's arrays) where the program ends before memscope's worker reaches it.
"""

from __future__ import annotations

import gc
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import pytest

from memscope.assemble.run import build_report
from memscope.capturing import capture, reading
from memscope.flow import run_and_report
from memscope.program.runner import Script
from memscope.report import FunctionReport

PROGRAMS = Path(__file__).resolve().parent / "programs"


def _line_of(program: Path, text: str) -> str:
    """``tests/programs/NAME.py:LINE`` of the line holding ``text``, as the report
    writes a path under the working directory."""
    lines = program.read_text().splitlines()
    number = next(i for i, line in enumerate(lines, 1) if text in line)
    return f"{program.relative_to(Path.cwd())}:{number}"


def _direct(fun, *args) -> object:
    """JAX's own compile of ``fun`` for ``args``: the ground truth of its figures."""
    return jax.jit(fun).lower(*args).compile().memory_analysis()


def _figures(fn: FunctionReport) -> tuple[int | None, int | None, int | None]:
    assert fn.memory is not None, fn.error
    return fn.memory.argument_bytes, fn.memory.output_bytes, fn.memory.temp_bytes


@pytest.fixture
def in_tests_parent(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(PROGRAMS.parent.parent)


@pytest.mark.usefixtures("in_tests_parent")
def test_one_factorys_closures_jitted_apart_are_two_functions_at_their_jit_lines() -> None:
    program = PROGRAMS / "jit_factory.py"
    report = run_and_report(Script(str(program)), advise="advised")
    assert report.run is not None and report.run.exit_code == 0
    double, triple = report.functions
    assert (double.name, double.source, double.jit_site) == (
        "<lambda>", _line_of(program, "double = jax.jit"), _line_of(program, "double = jax.jit"))
    assert (triple.source, triple.jit_site) == (_line_of(program, "triple = jax.jit"),) * 2
    # Two programs, each its own function's first signature: no recompile between them.
    assert double.recompile is None and triple.recompile is None
    x = jnp.ones((8,))
    truth = _direct(lambda v: v * 2.0, x)
    assert _figures(double) == _figures(triple) == (
        truth.argument_size_in_bytes, truth.output_size_in_bytes, truth.temp_size_in_bytes)


def test_one_jit_called_from_two_lines_stays_one_function() -> None:
    with capture() as session:
        f = jax.jit(lambda v, k: v * k)
        f(jnp.ones((4,)), 2.0)
        f(jnp.ones((4,)), 3.0)  # the same signature, another line: one entry
        f(jnp.ones((5,)), 2.0)
    report = build_report(session.entries, run=None)
    assert [fn.calls for fn in report.functions] == [2, 1]
    first, second = report.functions
    assert first.source == second.source and first.jit_site == second.jit_site
    # The same jit object compiled again for a new shape: said so.
    assert second.recompile is not None and second.recompile.since == 1


@pytest.mark.usefixtures("in_tests_parent")
def test_haiku_apply_jitted_by_the_user_is_named_at_the_users_jit_lines() -> None:
    hk = pytest.importorskip("haiku")
    program = PROGRAMS / "jit_haiku_apply.py"
    report = run_and_report(Script(str(program)), advise="advised")
    assert report.run is not None and report.run.exit_code == 0
    apply, run = report.functions
    assert (apply.name, apply.source, apply.jit_site) == (
        "model.apply", *(_line_of(program, "apply = jax.jit(model.apply)"),) * 2)
    assert (run.name, run.source, run.jit_site) == (
        "fast.apply", *(_line_of(program, "run = jax.jit(fast.apply"),) * 2)
    # The jit calls are the user's: the functions are theirs to advise, and no
    # recompile is said between two programs.
    assert apply.library is None and run.library is None
    assert apply.recompile is None and run.recompile is None
    assert run.advice is not None  # x (float32[2,8]) can become the output
    # Ground truth: Haiku's apply jitted directly.
    model = hk.without_apply_rng(hk.transform(lambda x: hk.Linear(4)(x)))
    x = jnp.ones((2, 8))
    params = model.init(jax.random.PRNGKey(0), x)
    truth = _direct(model.apply, params, x)
    assert _figures(apply) == (truth.argument_size_in_bytes, truth.output_size_in_bytes,
                               truth.temp_size_in_bytes)


def test_a_librarys_own_jit_stays_the_librarys() -> None:
    """A package's function jitted by code that is not the user's (here code
    compiled as a frozen module's, as the import system's is) keeps its
    library: no line of the user's made it, and no advice is given."""
    hk = pytest.importorskip("haiku")
    model = hk.without_apply_rng(hk.transform(lambda x: hk.Linear(4)(x)))
    x = jnp.ones((2, 8))
    params = model.init(jax.random.PRNGKey(0), x)
    # exec'd code that is no file of the user's: the jit call is nobody's line
    namespace = {"jax": jax, "model": model}
    with capture() as session:
        exec(compile("jitted = jax.jit(model.apply)", "<frozen library>", "exec"), namespace)
        namespace["jitted"](params, x)
    (entry,) = session.entries
    assert entry.library == "haiku" and entry.jit_site is None


@pytest.mark.usefixtures("in_tests_parent")
def test_the_targets_compile_outlives_a_program_that_ends_first(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The worker reaches the second call's compile for the target only after
    the program has ended and let go of its namespace (its function and the
    array it closes over): the call's program was lowered for the target while
    they existed, and is compiled from that lowering."""
    from memscope.compiled.targets import compile_only_target, tpu

    if not tpu.available():
        pytest.skip(f"libtpu is not installed ({tpu.libtpu_install_line()})")
    target = compile_only_target("tpu:v5e:2x2")
    real = reading._for_target

    def behind(*args, **kwargs):  # the worker busy until the program has ended
        time.sleep(0.5)
        gc.collect()
        return real(*args, **kwargs)

    monkeypatch.setattr(reading, "_for_target", behind)
    report = run_and_report(Script(str(PROGRAMS / "two_call_sites.py")), advise="off",
                            target=target)
    assert report.run is not None and report.run.exit_code == 0
    assert len(report.functions) == 2
    for fn in report.functions:
        assert fn.error is None, fn.error
        assert fn.memory is not None and fn.memory.peak_rule == "hbm"
