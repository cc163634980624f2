"""The advised variant's compile, begun beside JAX's compile of the call
(memscope.variants.early), changes when memscope compiles, never what it reports.

A program large enough to be predicted for (a model's parameters and optimizer
state, a few hundred equations) gets the same advised figures with and without
the early compile, equal to JAX's own compile of that donation; the function is
traced once; a prediction the advice does not settle on is dropped, counted,
and the advised variant compiled as usual; a small function is not predicted.
"""

from __future__ import annotations

import threading
from concurrent.futures import Future
from types import SimpleNamespace

import jax
import numpy as np
import pytest

from memscope.capturing import capture
from memscope.capturing import counts as counts_module
from memscope.compiled.targets.here import HereTarget
from memscope.variants import early
from tests.support.compiles import LEAVES, figures, traces, update, update_arguments, update_direct


def run(monkeypatch, *, first: int = counts_module.EARLY_FOR_FIRST, program=update):
    monkeypatch.setattr(counts_module, "EARLY_FOR_FIRST", first)
    traces.clear()
    jax.clear_caches()  # a first call lowers and compiles afresh
    with capture(advise="advised") as session:
        out = jax.jit(program)(*update_arguments())
    return session, out


def advised_variant(session):
    (entry,) = session.entries
    (variant,) = [v for v in entry.variants if v.name == "advised"]
    assert variant.error is None
    return variant


def test_the_early_compile_gives_the_figures_of_the_usual_one(monkeypatch):
    late, late_out = run(monkeypatch, first=0)
    assert traces == [1]
    begun, begun_out = run(monkeypatch)
    assert traces == [1]  # the trace taken early is the one the call ran
    for a, b in zip(jax.tree.leaves(late_out), jax.tree.leaves(begun_out), strict=True):
        np.testing.assert_array_equal(a, b)
    assert (late.overhead().early_compiles, late.overhead().early_unused) == (0, 0)
    assert (begun.overhead().early_compiles, begun.overhead().early_unused) == (1, 0)
    assert late.overhead().variant_compiles == begun.overhead().variant_compiles == 1
    a, b = advised_variant(late), advised_variant(begun)
    # x (float32[]) goes into the loss (float32[]) too
    assert a.setting == b.setting == 'donate_argnames=("params", "state", "x")'
    assert a.facts.program.donated == b.facts.program.donated
    assert figures(a.facts.memory) == figures(b.facts.memory)
    # ... and both are JAX's own compile of that donation
    got = figures(b.facts.memory)
    assert {k: got[k] for k in update_direct((0, 1, 2))} == update_direct((0, 1, 2))
    assert got["alias_bytes"] > 0


def test_a_prediction_the_advice_does_not_take_is_dropped_and_counted(monkeypatch):
    real = early.predict

    def only_params(traced, leaves, arguments, style):  # a prediction that misses
        mask = real(traced, leaves, arguments, style)
        assert mask is not None
        return tuple(i < LEAVES for i in range(len(mask)))

    monkeypatch.setattr(early, "predict", only_params)
    session, _ = run(monkeypatch)
    overhead = session.overhead()
    assert (overhead.early_compiles, overhead.early_unused) == (1, 1)
    assert overhead.variant_compiles == 2  # the dropped one was a real compile
    got = figures(advised_variant(session).facts.memory)
    assert {k: got[k] for k in update_direct((0, 1, 2))} == update_direct((0, 1, 2))


def small(params, state, x):
    return [p * x for p in params], state, x


@pytest.mark.parametrize("program", [small], ids=["few equations"])
def test_a_small_function_is_not_predicted(monkeypatch, program):
    session, _ = run(monkeypatch, program=program)
    assert session.overhead().early_compiles == 0


def test_a_call_whose_trace_fails_raises_as_it_would_without_memscope(monkeypatch):
    def broken(params, state, x):
        update(params, state, x)
        raise ValueError("the model's own error")

    monkeypatch.setattr(counts_module, "EARLY_FOR_FIRST", 4)
    with pytest.raises(ValueError, match="the model's own error") as plain:
        jax.jit(broken)(*update_arguments())
    with capture(advise="advised") as session, pytest.raises(ValueError) as measured:
        jax.jit(broken)(*update_arguments())
    assert str(measured.value) == str(plain.value)
    assert type(measured.value) is type(plain.value)
    assert session.overhead().early_compiles == 0


def test_the_early_compile_begins_once_the_call_has_returned(monkeypatch):
    # Not beside JAX's compile of the call: the two would hold both their memory.
    started = threading.Event()
    monkeypatch.setattr(early, "compile_lowered", lambda *a, **k: started.set())
    variant = early.EarlyVariant((True,))
    host = SimpleNamespace(worker=SimpleNamespace(cancelled=False), cache=None,
                           target=HereTarget())
    waiting = threading.Thread(target=early._unless_cancelled, args=(host, variant, None, ()))
    waiting.start()
    assert not started.wait(0.3)
    variant.released.set()  # (capturing.jit, once JAX's call has returned or raised)
    assert started.wait(10)
    waiting.join(10)


def test_the_call_is_read_after_the_early_compile_unless_the_report_waits():
    variant = early.EarlyVariant((True,))
    variant.ready.set()
    variant.compile = Future()
    ended = threading.Event()
    done = threading.Event()
    reader = threading.Thread(target=lambda: (variant.settle(ended.is_set), done.set()))
    reader.start()
    assert not done.wait(0.3)  # the compile runs: the read waits
    variant.compile.set_result(None)
    assert done.wait(10)
    reader.join(10)
    variant.compile = Future()  # still compiling, but the program has ended
    ended.set()
    variant.settle(ended.is_set)  # returns at once
