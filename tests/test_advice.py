"""The advisor: variant figures and fates against JAX's own compiles, advice that works.

Every variant figure is compared with ``jax.jit(f, donate_argnums=...).lower(...)
.compile().memory_analysis()`` computed directly; every variant fate with what
JAX does to the buffers when that donation really runs; and the printed advice,
applied to a sample program, makes its candidates ``aliased`` and lowers the
peak by exactly the amount memscope measured.
"""

from __future__ import annotations

import shutil
import warnings
from contextlib import nullcontext
from functools import partial
from pathlib import Path

import jax
import jax.numpy as jnp
import pytest
from jax import monitoring

from memscope import _compat
from memscope._compat import SAME_SIZE_DONORS
from memscope.capturing import capture
from memscope.flow import analyze, run_and_report
from memscope.program.runner import Script
from tests.truth import assert_matches_runtime, expected_peak, fates
from tests.truth import run_and_report as run_truth
from tests.versions import NO_SAME_SIZE_DONORS
from tests.versions import SAME_SIZE_DONORS as SINCE_SAME_SIZE_DONORS

#: XLA compiles memscope adds per captured function to read its buffer
#: assignment: none where ``memory_analysis()`` carries it (XLA:CPU), else one
#: with XLA's dump (XLA:GPU; memscope.compiled.read.read_stages)
DUMPED = 0 if _compat.stages.assignment_in_memory_analysis(jax.jit(lambda x: x).lower(1.0)) else 1

NOT_USABLE = "ignore:Some donated buffers were not usable"
SAMPLES = Path(__file__).resolve().parent.parent / "sample_programs"
FIGURES = {"argument_bytes": "argument_size_in_bytes", "output_bytes": "output_size_in_bytes",
           "alias_bytes": "alias_size_in_bytes", "temp_bytes": "temp_size_in_bytes",
           "xla_peak_bytes": "peak_memory_in_bytes"}


def step(params, opt_state, batch):
    grads = jax.tree.map(lambda p: p * jnp.mean(batch), params)
    new_params = jax.tree.map(lambda p, g: p - 0.1 * g, params, grads)
    new_opt = jax.tree.map(lambda o, g: 0.9 * o + g, opt_state, grads)
    return new_params, new_opt, jnp.mean(batch)


def args():
    params = {"w": jnp.ones((128, 64)), "b": jnp.ones(64)}
    opt_state = {"w": jnp.zeros((128, 64)), "b": jnp.zeros(64)}
    return params, opt_state, jnp.ones((16, 128))


def direct_figures(donate):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        stats = jax.jit(step, donate_argnums=donate).lower(*args()).compile().memory_analysis()
    # memscope's peak is held to XLA's own figures (tests.truth.expected_peak)
    return {**{ours: getattr(stats, theirs) for ours, theirs in FIGURES.items()},
            "peak_bytes": expected_peak(stats)}


def figures(memory):
    return {name: getattr(memory, name) for name in (*FIGURES, "peak_bytes")}


@pytest.mark.parametrize("written", [(), (0,), (0, 1, 2)])
def test_variant_figures_equal_memory_analysis_of_that_donation(written):
    # Lower afresh, as a program's first call does: otherwise whether JAX warns
    # depends on whether an earlier test already lowered this donation.
    jax.clear_caches()
    # batch (float32[16,128]) has no output to reuse its buffer: JAX says so.
    unusable = 2 in written
    with pytest.warns(UserWarning, match="not usable") if unusable else nullcontext():
        report = analyze(jax.jit(step, donate_argnums=written), *args())
    assert any("not usable" in w for w in report.warnings) == unusable
    donations = {"none": (), "all": (0, 1, 2), "advised": (0, 1)}
    # Donating all three, batch's donation is of no use: the advice drops it.
    assert [v.name for v in report.variants] == ["none", "all", "advised"]
    for v in report.variants:
        assert v.error is None
        assert figures(v.memory) == direct_figures(donations[v.name]), v.name
        assert v.same_as_written == (donations[v.name] == written)
    assert figures(report.memory) == direct_figures(written)
    if unusable:
        a = report.advice
        assert (a.setting, a.add, a.drop) == ('donate_argnames=("params", "opt_state")', (),
                                             ("batch",))
        assert (a.peak_before, a.peak_after) == (direct_figures(written)["peak_bytes"],
                                                 direct_figures((0, 1))["peak_bytes"])
        assert a.worthwhile


def test_variant_fates_are_what_that_donation_does_at_run_time():
    report = analyze(jax.jit(step), *args())
    advised = report.variant("advised")
    assert advised.setting == 'donate_argnames=("params", "opt_state")'
    truth, inputs, pointers, out = run_truth(
        lambda: jax.jit(step, donate_argnames=("params", "opt_state")), *args())
    assert_matches_runtime(truth, inputs, pointers, out)
    assert {b.path: b.fate for b in advised.inputs} == {b.path: b.fate for b in truth.inputs}
    assert ({b.path: (b.fate, b.input) for b in advised.outputs}
            == {b.path: (b.fate, b.input) for b in truth.outputs})


def test_advice_names_the_fix_in_the_users_terms_with_the_measured_peaks():
    report = analyze(jax.jit(step, donate_argnames=("params",)), *args())
    a = report.advice
    assert a.setting == 'donate_argnames=("params", "opt_state")'
    assert a.add == ("opt_state",)
    candidates = [b.path for b in report.inputs if b.candidate]
    assert candidates == ["opt_state['b']", "opt_state['w']"]
    assert a.candidate_bytes == (64 + 128 * 64) * 4
    assert a.peak_before == direct_figures((0,))["peak_bytes"]
    assert a.peak_after == direct_figures((0, 1))["peak_bytes"]
    assert a.peak_before - a.peak_after == a.candidate_bytes
    assert "not read after the call" in a.caveat

def test_a_function_jitted_with_numbers_is_advised_in_numbers():
    from memscope.assemble.function import function_report

    with capture(advise=True) as session:  # jitted inside: memscope sees the spelling
        jax.jit(step, donate_argnums=0)(*args())
    numbered = function_report(session.entries[0])
    assert numbered.advice.setting == "donate_argnums=(0, 1)"
    assert numbered.setting == "donate_argnums=(0,)"


def test_no_advice_when_everything_that_can_be_is_donated():
    report = analyze(jax.jit(step, donate_argnums=(0, 1)), *args())
    assert report.advice is None
    assert not any(b.candidate for b in report.inputs)


def test_variants_are_silent_do_not_retrace_and_compile_once_each():
    traces = []

    def traced_step(*a):
        traces.append(1)
        return step(*a)

    compiles = []
    monitoring.register_event_duration_secs_listener(
        lambda name, secs, **kw: compiles.append(name)
        if name == "/jax/core/compile/backend_compile_duration" else None)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # "donate all" leaves batch unusable: not our warning
        with capture(advise=True) as session:
            jax.jit(traced_step)(*args())
    (entry,) = session.entries
    assert traces == [1]
    assert len(compiles) - DUMPED == 1 + sum(not v.same_as_written for v in entry.variants) == 3
    donate_all = next(v for v in entry.variants if v.name == "all")
    assert any("not usable" in w for w in donate_all.warnings)


def test_without_the_advisor_nothing_more_is_compiled():
    with capture() as session:
        jax.jit(step)(*args())
    (entry,) = session.entries
    assert entry.variants == []


@pytest.mark.filterwarnings(NOT_USABLE)
def test_unusable_because_earlier_donations_took_the_outputs():
    report, inputs, pointers, out = run_truth(
        lambda: jax.jit(lambda a, b: a + b, donate_argnums=(0, 1)), jnp.ones(8), jnp.ones(8))
    assert_matches_runtime(report, inputs, pointers, out)
    from memscope.analysis.advice import annotate

    a, b = annotate(report.inputs, report.outputs, same_size_donors=SAME_SIZE_DONORS)
    assert (a.fate, a.reason) == ("aliased", None)
    assert b.fate == "unusable"
    assert "already written into an earlier donated argument (result <- a)" in b.reason
    assert b.reason.endswith("as many float32[8] arguments as the function returns.")


def _sample_reasons():
    """``unusable_donation.step`` donating all three arguments, run for real, and
    memscope's reasons for its leaves."""
    import sys

    sys.path.insert(0, str(SAMPLES))
    try:
        import unusable_donation as sample
    finally:
        sys.path.remove(str(SAMPLES))
    from _data import batch, init_params

    x, y = batch(jax.random.key(0))
    params = init_params(jax.random.key(1))
    report, inputs, pointers, out = run_truth(
        lambda: jax.jit(sample.step, donate_argnums=(0, 1, 2)), params, x, y)
    assert_matches_runtime(report, inputs, pointers, out)
    from memscope.analysis.advice import annotate

    annotated = annotate(report.inputs, report.outputs, same_size_donors=SAME_SIZE_DONORS)
    return {b.path: b for b in annotated}


@SINCE_SAME_SIZE_DONORS
@pytest.mark.filterwarnings(NOT_USABLE)
def test_reasons_for_donor_and_unusable_leaves_of_a_sample_program():
    by_path = _sample_reasons()
    donor, unusable = by_path["x"], by_path["y"]
    assert donor.fate == "donor"
    assert "result[1] (bfloat16[128,32]) has the same element count" in donor.reason
    used = "XLA used it for" in donor.reason
    assert used == (donor.output is not None)
    assert unusable.fate == "unusable"
    assert unusable.reason.startswith("No output is float32[128,1] or has its 128 elements")
    assert unusable.reason.endswith("or return its updated value.")


@NO_SAME_SIZE_DONORS
@pytest.mark.filterwarnings(NOT_USABLE)
def test_before_jax_0_8_the_sample_batch_is_unusable_and_the_reason_says_why():
    by_path = _sample_reasons()
    x, y = by_path["x"], by_path["y"]
    assert (x.fate, y.fate) == ("unusable", "unusable")
    assert x.reason.startswith("No output is float32[128,32]. result[1] has its 4096 "
                               "elements, but this JAX (before 0.8) pairs donations only by "
                               "shape and dtype.")
    assert y.reason.startswith("No output is float32[128,1] or has its 128 elements")


def _apply(path: Path, setting: str) -> None:
    text = path.read_text()
    assert "@jax.jit\ndef train_step" in text
    path.write_text("from functools import partial\n" + text.replace(
        "@jax.jit\ndef train_step", f"@partial(jax.jit, {setting})\ndef train_step"))


@pytest.mark.parametrize("sample", ["forgot_to_donate.py", "passthrough_copy.py"])
def test_applying_the_printed_advice_makes_candidates_aliased_at_the_predicted_peak(
        tmp_path, sample):
    for name in (sample, "_data.py"):
        shutil.copy(SAMPLES / name, tmp_path / name)
    script = tmp_path / sample
    (before,) = run_and_report(Script(str(script), ("--steps", "2")), advise=True).functions
    advice = before.advice
    assert advice is not None and advice.peak_after < advice.peak_before
    candidates = {b.path for b in before.inputs if b.candidate}
    assert candidates
    _apply(script, advice.setting)
    (after,) = run_and_report(Script(str(script), ("--steps", "2")), advise=True).functions
    assert after.setting == advice.setting
    assert {b.path for b in after.inputs if b.fate == "aliased"} == candidates
    assert after.memory.peak_bytes == advice.peak_after
    assert after.advice is None
    assert not [o for o in after.outputs if o.fate == "copy_of_input"]


def test_leaf_reasons_and_variants_survive_json():
    from memscope.assemble.run import build_report
    from memscope.report import Report

    with capture(advise=True) as session:
        jax.jit(step, donate_argnums=0)(*args())
    report = build_report(session.entries, run=None)
    again = Report.from_json(report.to_json())
    assert again == report
    assert again.functions[0].variant("advised").memory.peak_bytes > 0


def test_keyword_arguments_are_donated_by_name():
    @partial(jax.jit, donate_argnames=("params",))
    def f(params, *, opt_state):
        return jax.tree.map(lambda p: p + 1, params), jax.tree.map(lambda o: o * 2, opt_state)

    report = analyze(f, {"w": jnp.ones(4)}, opt_state={"m": jnp.ones(4)})
    assert report.advice.setting == 'donate_argnames=("params", "opt_state")'
    assert fates(report)["opt_state['m']"] == ("not_donated", None)
    assert report.variant("advised").memory.alias_bytes == 32


def jax_cache_growth(advise) -> tuple[int, int]:
    """Entries a captured call of a new function adds to JAX's lowering and
    compiled-executable caches, once the capture has ended."""
    from jax._src import pjit
    from jax._src.interpreters import pxla

    def sizes():
        return (pjit._pjit_lower.cache_info().currsize,
                pxla._cached_compilation.cache_info().currsize)

    def fresh(*a):  # a new function: its own cache entries
        return step(*a)
    before = sizes()
    with capture(advise=advise) as session:
        jax.jit(fresh)(*args())
    import gc

    gc.collect()
    assert session.entries[0].variants or not advise
    return tuple(after - b for after, b in zip(sizes(), before, strict=True))


def test_variant_lowerings_and_executables_are_not_kept():
    jax_cache_growth(advise=False)  # JAX's own helpers (jnp.ones, ...) fill their caches once
    # the program's own lowering and executable are JAX's, kept as without memscope;
    # the two variants compiled for the advice leave nothing behind
    assert jax_cache_growth(advise=True) == jax_cache_growth(advise=False) == (1, 1)


def test_a_function_compiled_again_for_xlas_dump_leaves_nothing_in_jaxs_caches(monkeypatch):
    """Where memory_analysis() has no buffer assignment (XLA:GPU), memscope compiles
    each function once more with XLA's dump: that compile goes with its read, not
    into JAX's executable cache beside the program's own for as long as it lives."""
    from tests.test_compile_cache import without_the_assignment

    without_the_assignment(monkeypatch)
    jax_cache_growth(advise=False)
    table = jnp.arange(64.0)  # (a function that closes over an array: the same)
    with capture(advise=False) as session:
        jax.jit(lambda *a: step(*a))(*args())
        jax.jit(lambda x: x * table)(jnp.ones(64))
    for entry in session.entries:
        assert entry.facts.dumped == "compiled" and entry.facts.buffers is not None
    assert jax_cache_growth(advise=True) == jax_cache_growth(advise=False) == (1, 1)


PASSED_AGAIN = """
import jax, jax.numpy as jnp, sys

def step(params, table, batch):
    grads = jax.tree.map(lambda p: p * jnp.mean(batch @ table), params)
    return jax.tree.map(lambda p, g: p - 0.1 * g, params, grads), table * 2.0

donate = eval(sys.argv[1]) if len(sys.argv) > 1 else None
step = jax.jit(step, donate_argnums=donate) if donate is not None else jax.jit(step)
params = {"w": jnp.ones((64, 64)), "b": jnp.ones(64)}
table = jnp.ones((64, 64))           # kept: passed again at every call
for i in range(3):
    params, scaled = step(params, table, jnp.ones((8, 64)))
print(float(params["b"][0]), float(scaled.sum()))
"""


def test_an_array_the_caller_passes_again_is_never_advised(tmp_path, capfd, monkeypatch):
    """``table`` is the very same array at every call, and an output of its shape
    is a new buffer: by shapes it is a candidate, but donating it would delete it
    at the first call and the second would fail. memscope sees it passed again
    and advises ``params`` only; JAX's own run of each setting is the truth.

    The one path: each compiled program's buffers are classified once, when the
    capture reads it; the advisor plans from that classification and the report
    reads it, with the leaves the caller passed again marked on it."""
    from memscope.analysis import fates as fates_module
    from memscope.capturing import reading
    from memscope.variants import donation_variants

    programs, classified = [], []

    def counting(program, warnings=()):
        programs.append(program)
        classified.append(fates_module.classify(program, warnings))
        return classified[-1]

    monkeypatch.setattr(reading, "classify", counting)
    monkeypatch.setattr(donation_variants, "classify", counting)
    script = tmp_path / "prog.py"
    script.write_text(PASSED_AGAIN)
    report = run_and_report(Script(str(script)), advise="advised")
    (fn,) = report.functions
    assert len({id(p) for p in programs}) == len(programs)  # none classified twice
    assert classified and [(b.path, b.fate) for b in fn.inputs] == [
        (b.path, b.fate) for b in classified[0].inputs]  # the call's, read by the report
    assert all(any(v.inputs is c.inputs for c in classified)
               for v in fn.variants if v.memory is not None)  # each variant's likewise
    table = [b for b in fn.inputs if b.path == "table"]
    assert [(b.candidate, b.passed_again) for b in table] == [(False, 2)]
    assert "passed this very array again at call 2" in (table[0].reason or "")
    # The advice never donates the table. Measured after the second call it is
    # params alone; measured before it (memscope's worker ran first, as on a
    # loaded machine) it donated the table too and is withdrawn (report-format.md).
    assert fn.advice is None or fn.advice.setting == 'donate_argnames=("params",)'
    assert all(b.passed_again is None for b in fn.inputs if b.path != "table")
    capfd.readouterr()
    # The truth: the advised setting runs; donating the table too does not.
    import subprocess
    import sys
    ok = subprocess.run([sys.executable, str(script), "(0,)"], capture_output=True, text=True)
    assert ok.returncode == 0, ok.stderr
    broken = subprocess.run([sys.executable, str(script), "(0, 1)"], capture_output=True,
                            text=True)
    assert broken.returncode != 0 and "deleted" in broken.stderr


def test_advice_measured_before_the_next_call_is_withdrawn_when_it_would_donate_a_kept_array(
        tmp_path, capfd):
    """MaxText's synthetic batches: one argument, the same tuple of arrays at every
    call. Whatever the worker measured before the second call, no advice donates
    it, and each leaf says why."""
    script = tmp_path / "prog.py"
    script.write_text(
        "import jax, jax.numpy as jnp\n"
        "@jax.jit\n"
        "def batch(data):\n"
        "    tokens, positions, segments = data\n"
        "    return {'inputs': tokens[:, :-1], 'segments': segments, 'pos': positions + 0}\n"
        "data = (jnp.ones((4, 129), jnp.int32), jnp.ones((4, 129), jnp.int32),\n"
        "        jnp.ones((4, 128), jnp.int32))\n"
        "for _ in range(3):\n"
        "    out = batch(data)\n")
    report = run_and_report(Script(str(script)), advise="full")
    (fn,) = report.functions
    assert [b.passed_again for b in fn.inputs] == [2, 2, 2]
    assert not any(b.candidate for b in fn.inputs)
    assert fn.advice is None
    capfd.readouterr()


def test_a_token_argument_is_read_and_never_advised(capfd):
    """A token (``jax.lax.create_token()``) passed to a jitted function has no
    shape and holds no buffer: the function is read (JAX's own
    ``test_trivial_computations_with_tokens`` had no figures under memscope),
    and the advice never donates the token, which XLA refuses (it logged an
    INTERNAL error with a C++ stack trace when memscope compiled that variant)."""
    @jax.jit
    def noop(arr, token):
        return arr, token

    arr, token = jnp.ones(10), jax.lax.create_token()
    report = analyze(noop, arr, token, advise="full")
    assert report.error is None and report.memory is not None
    by_path = {b.path: b for b in report.inputs}
    assert (by_path["token"].dtype, by_path["token"].bytes) == ("token", 0)
    assert not by_path["token"].candidate and by_path["arr"].candidate
    assert report.advice is not None and report.advice.add == ("arr",)
    assert "RET_CHECK" not in capfd.readouterr().err
