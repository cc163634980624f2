"""memscope's own work runs off the program's path, and compiles only what it must.

The program's call returns while a variant's compile is held back; the variant's
figures are still JAX's own for that donation; pending work keeps none of the
call's arrays alive; each distinct donation is compiled once (JAX's monitoring
events count XLA's compiles); ``--advice`` chooses which donations are measured.
"""

from __future__ import annotations

import _thread
import gc
import json
import os
import re
import threading
import time
import warnings
import weakref

import jax
import jax.numpy as jnp
import pytest
from click.testing import CliRunner

from memscope.capturing import capture
from memscope.cli import cli
from memscope.compiled.targets.here import HereTarget
from memscope.flow import analyze
from memscope.report import load_report
from tests.support.compiles import DUMPED, args, count_compiles, direct_figures, figures, step
from tests.support.samples import SAMPLES
from tests.support.versions import enable_x64


def hold_variant_compiles(monkeypatch
                          ) -> tuple[threading.Event, threading.Event, list[str]]:
    """Make every variant compile wait for the returned ``release`` event; ``started``
    is set when the first one has begun; the list records the thread of each."""
    release, started = threading.Event(), threading.Event()
    threads: list[str] = []
    real = HereTarget._compile

    def held(self, lowered, options):
        niceness = os.getpriority(os.PRIO_PROCESS, threading.get_native_id())
        threads.append(f"{threading.current_thread().name} nice {niceness}")
        started.set()
        assert release.wait(120), "the test never released the compile"
        return real(self, lowered, options)

    monkeypatch.setattr(HereTarget, "_compile", held)
    return release, started, threads


def test_the_call_returns_while_a_variant_compile_is_held(monkeypatch):
    release, started, threads = hold_variant_compiles(monkeypatch)
    own = os.getpriority(os.PRIO_PROCESS, threading.get_native_id())  # CI runs some at 10
    with capture(advise="full") as session:
        # Were the compile on the call's path, the call would wait for the release
        # below (and the compile's own wait would give up and fail the test).
        out = jax.jit(step)(*args())
        assert started.wait(120)  # a compile has begun, and is held, after the call returned
        assert session.entries[0].variants == []  # not measured yet
        release.set()
    # while the program runs, one compile at a time, at the lowest priority (the
    # calling thread keeps its own)
    assert len(threads) == 2
    assert all(re.fullmatch(r"memscope-worker-compile_\d+ nice 19", t) for t in threads)
    assert os.getpriority(os.PRIO_PROCESS, threading.get_native_id()) == own
    (entry,) = session.entries
    assert {v.name for v in entry.variants} == {"none", "all", "advised"}
    advised = next(v for v in entry.variants if v.name == "advised")
    assert figures(advised.facts.memory) == direct_figures((0, 1))
    assert jnp.allclose(out[2], jnp.mean(args()[2]))
    assert session.overhead().after_exit_seconds >= 0


def test_pending_work_keeps_no_array_of_the_call_alive(monkeypatch):
    release, started, _ = hold_variant_compiles(monkeypatch)
    with capture(advise="full") as session:
        params, opt_state, batch = args()
        refs = [weakref.ref(x) for x in jax.tree.leaves((params, opt_state, batch))]
        out = jax.jit(step)(params, opt_state, batch)
        del params, opt_state, batch, out
        assert started.wait(120)  # the work is under way, holding what it holds
        gc.collect()
        alive = [r() is not None for r in refs]
        release.set()
    assert not any(alive)
    assert session.entries[0].variants


def test_variants_lower_under_the_settings_the_call_ran_with(monkeypatch):
    from memscope.variants import donation_variants as capture_module

    seen = []
    real = capture_module.lower_variant

    def recording(traced, mask, target):
        seen.append((threading.current_thread().name, jax.config.jax_enable_x64))
        return real(traced, mask, target)

    monkeypatch.setattr(capture_module, "lower_variant", recording)

    def f(x):
        return x * 2

    with enable_x64(True):  # for this thread only
        x = jnp.ones(64, jnp.float64)
        with capture(advise="full") as session:
            jax.jit(f)(x)
        stats = jax.jit(f, donate_argnums=0).lower(x).compile().memory_analysis()
    assert seen == [("memscope-worker", True)]  # "none" is the program itself
    donated = next(v for v in session.entries[0].variants if v.name == "all")
    assert donated.error is None
    assert donated.facts.memory.argument_bytes == stats.argument_size_in_bytes == 512
    assert donated.facts.memory.alias_bytes == stats.alias_size_in_bytes


def two_arrays(a, b):
    return a + 1, b * 2


def test_the_same_donation_is_compiled_once():
    # "donate all" and the advised donation are the same here: one compile for both.
    a, b = jnp.ones((32, 8)), jnp.ones(16)

    def run():
        with capture(advise="full") as session:
            jax.jit(lambda *x: two_arrays(*x))(a, b)  # new: nothing in JAX's caches
        run.session = session

    assert count_compiles(run) == 1 + DUMPED + 1
    session = run.session
    variants = {v.name: v for v in session.entries[0].variants}
    assert variants["none"].same_as_written
    assert variants["all"].same_as is None and variants["advised"].same_as == "all"
    assert variants["advised"].facts is variants["all"].facts
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        stats = jax.jit(two_arrays, donate_argnums=(0, 1)).lower(a, b).compile(
            ).memory_analysis()
    assert variants["advised"].facts.memory.alias_bytes == stats.alias_size_in_bytes > 0
    overhead = session.overhead()
    assert (overhead.variant_compiles, overhead.variants_reused) == (1, 2)


@pytest.mark.parametrize(("level", "names", "compiles"), [
    ("off", set(), 1), ("advised", {"advised"}, 2), ("full", {"none", "all", "advised"}, 3)])
def test_advice_levels_choose_the_variants_compiled(level, names, compiles):
    call_args = args()

    def run():
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # "donate all" leaves batch unusable
            run.report = analyze(jax.jit(lambda *a: step(*a)), *call_args, advise=level)

    assert count_compiles(run) == compiles + DUMPED
    assert {v.name for v in run.report.variants} == names
    assert (run.report.advice is not None) == (level != "off")


def test_nothing_to_advise_compiles_nothing_more():
    call_args = args()

    def run():
        run.report = analyze(jax.jit(lambda *a: step(*a), donate_argnums=(0, 1)),
                             *call_args, advise="advised")

    assert count_compiles(run) == 1 + DUMPED
    assert run.report.variants == () and run.report.advice is None


def test_memscope_run_advice_option_and_its_overhead_in_the_report(tmp_path):
    out = tmp_path / "r.json"
    result = CliRunner().invoke(cli, ["run", "-q", "--advice", "full", "-o", str(out),
                                      str(SAMPLES / "forgot_to_donate.py"), "--steps", "1"],
                                catch_exceptions=False)
    assert result.exit_code == 0, result.output
    report = load_report(str(out))
    (fn,) = report.functions
    assert {v.name for v in fn.variants} == {"none", "all", "advised"}
    overhead = report.runtime.overhead
    # --advice full also compiles the checkpoint policies of a step that
    # differentiates (the program as written is not one of them), and the
    # advised policy with the advised donation where a policy saves
    remat = fn.remat
    # as written, the four standard policies and offload_dot_with_no_batch_dims
    # (the sample names no value with checkpoint_name: no names policy)
    assert remat is not None and len(remat.variants) == 6
    policies = len(remat.variants) - 1 + bool(
        remat.advice is not None and remat.advice.combined)
    assert overhead.variant_compiles == sum(
        not v.same_as_written and v.same_as is None for v in fn.variants) + policies
    assert overhead.analysis_seconds > 0 and overhead.after_exit_seconds >= 0
    assert json.loads(out.read_text())["runtime"]["overhead"]["host_bytes"] is not None


def test_no_advice_contradicting_advice_is_a_usage_error():
    result = CliRunner().invoke(cli, ["run", "--no-advice", "--advice", "full", "x.py"])
    assert result.exit_code == 2
    assert "--no-advice and --advice full contradict each other" in result.output


def test_ctrl_c_while_the_report_waits_keeps_what_was_read(monkeypatch):
    release, started, _ = hold_variant_compiles(monkeypatch)

    def interrupt_once_waiting(session):
        while not session.worker.draining:
            time.sleep(0.01)
        _thread.interrupt_main()

    try:
        with capture(advise="full") as session:
            jax.jit(step)(*args())
            assert started.wait(120)
            threading.Thread(target=interrupt_once_waiting, args=(session,)).start()
        (entry,) = session.entries
        # the as-written program was read before the variants' compile was held
        assert entry.facts is not None and entry.error is None
        assert entry.variants == [] and session.worker.cancelled
        assert session.overhead() is not None
    finally:
        release.set()
        session.worker.join(120)  # the compile it was in ends as it would


def test_real_sized_sample_one_advised_compile_and_memscope_cost_reported():
    # transformer_adam.py: 405 input leaves; the default advice compiles the advised
    # donation once, and "donate all" is not compiled.
    from memscope.flow import run_and_report
    from memscope.program.runner import Script

    def run():
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            run.report = run_and_report(Script(str(SAMPLES / "transformer_adam.py"),
                                               ("--steps", "1")), advise="advised")

    def plain():
        run_and_report(Script(str(SAMPLES / "transformer_adam.py"), ("--steps", "1")))

    plain()  # JAX's own helpers compile once per process
    plain_compiles = count_compiles(plain)  # the step (a new function each run)
    assert count_compiles(run) == plain_compiles + 1
    (fn,) = run.report.functions
    assert len(fn.inputs) == 405
    assert [v.name for v in fn.variants] == ["advised"]
    assert fn.advice is not None and fn.variants[0].memory.peak_bytes < fn.memory.peak_bytes
    overhead = run.report.runtime.overhead
    assert (overhead.variant_compiles, overhead.variants_reused) == (1, 0)
    assert overhead.analysis_seconds > 0


def test_candidates_too_small_to_matter_get_no_advised_compile():
    """A candidate holding under 1% of the peak cannot save more than it holds:
    no compile, and a note (not a warning) that says why it is not advised."""
    from memscope.views.summary import summarize_function

    def f(s, w):
        return s + jnp.sum(w @ w.T)

    s, w = jnp.ones(4), jnp.ones((512, 512))

    def run():
        run.report = analyze(jax.jit(f), s, w, advise="advised")

    assert count_compiles(run) == 1 + DUMPED
    fn = run.report
    assert [b.path for b in fn.inputs if b.candidate] == ["s"]
    assert fn.variants == () and fn.advice is None
    (note,) = [f for f in summarize_function(fn).findings if "could reuse" in f.text]
    assert note.severity == "info" and "under 1%" in note.text and note.leaves == "s"


def test_many_small_functions_get_the_advised_compile_for_the_first_50_only():
    """A run of many small jitted functions (a test suite): the first 50
    signatures with candidates get their advised compile, the rest do not, and
    the report says so; a function with a peak of 1 MiB or more always does."""
    from memscope.assemble.run import build_report
    from memscope.capturing.counts import ADVICE_FOR_EVERY

    with capture(advise="advised") as session:
        for i in range(ADVICE_FOR_EVERY + 5):
            jax.jit(lambda x, i=i: x * i)(jnp.ones(8 + i))  # a new function, x a candidate
        big = jax.jit(lambda x: x * 2)(jnp.ones(1 << 18))  # 1 MiB argument and output
        del big
    overhead = session.overhead()
    assert overhead.advice_skipped == 5
    assert overhead.variant_compiles == ADVICE_FOR_EVERY + 1
    report = build_report(session.entries, None, session.runtime())
    assert sum(f.advice is not None for f in report.functions) == ADVICE_FOR_EVERY + 1
    (note,) = [n for n in report.notes if "not compiled for 5 signatures" in n]
    assert f"after the first {ADVICE_FOR_EVERY}" in note and "1.0 MiB" in note
