"""memscope holds nothing of the program's: the jit stand-in is JAX's object to
every caller, and nothing the program let go of lives on through memscope.

JAX's own tests are the model (``tests/api_test.py::JitTest``: ``test_fun_name``,
``test_jit_cache_clear``, ``test_jit_reference_dropping``): the same checks run
here on many functions in one run, each program once under python and once
under ``memscope run``, and their printed facts must be equal. The facts are
JAX's own: weak references to arrays, ``client.live_executables()``, the jit
object's attributes.
"""

from __future__ import annotations

import copy
import functools
import inspect
import pickle
import subprocess
import sys
import textwrap
from pathlib import Path

import jax
import jax.numpy as jnp
import pytest

from memscope.capturing import capture
from tests.support.cli import MEMSCOPE


def _both(tmp_path: Path, source: str, *options: str) -> tuple[str, str]:
    """The program's stdout under python and under ``memscope run OPTIONS``."""
    script = tmp_path / "prog.py"
    script.write_text(textwrap.dedent(source))
    plain = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                           cwd=tmp_path)
    under = subprocess.run([MEMSCOPE, "run", "-q", *options, str(script)],
                           capture_output=True, text=True, cwd=tmp_path)
    assert plain.returncode == 0, plain.stderr
    assert under.returncode == 0, under.stderr
    return plain.stdout, under.stdout


# --- the stand-in's protocol ------------------------------------------------------


def _fn(x, y=2.0):
    """Doc of _fn."""
    return x * y


class _Model:
    def step(self, x):
        return x + 1


def _callables():
    named = functools.partial(_fn, y=3.0)
    named.__name__ = "named"  # type: ignore[attr-defined]
    return {"function": (_fn, {}), "partial": (functools.partial(_fn, y=3.0), {}),
            "named partial": (named, {}), "lambda": (lambda x: x - 1, {}),
            "method": (_Model().step, {}),
            "static and donated": (_fn, {"static_argnames": ("y",), "donate_argnums": 0})}


@pytest.mark.parametrize("name", list(_callables()))
def test_the_stand_in_answers_as_jax_s_own_jit_object(name):
    fun, options = _callables()[name]
    real = jax.jit(fun, **options)
    with capture() as session:
        stand_in = jax.jit(fun, **options)
        assert type(stand_in).__name__ == "MeasuredJit"  # the stand-in under test
        x = jnp.arange(4.0)
        stand_in(jnp.arange(4.0))
        real(jnp.arange(4.0))
        # What the object says of itself.
        for attribute in ("__name__", "__qualname__", "__doc__", "__module__"):
            assert getattr(stand_in, attribute) == getattr(real, attribute), attribute
        assert stand_in.__wrapped__ is real.__wrapped__
        assert stand_in.__class__ is real.__class__ and isinstance(stand_in, type(real))
        assert inspect.signature(stand_in) == inspect.signature(real)
        assert sorted(dir(stand_in)) == sorted(dir(real))
        assert repr(stand_in).split(" at ")[0] == repr(real).split(" at ")[0]
        state, real_state = stand_in.__getstate__(), real.__getstate__()
        assert sorted(state) == sorted(real_state)
        assert state["function_name"] == real_state["function_name"]
        # Equality and hashing: by identity, as JAX's.
        assert stand_in == stand_in and stand_in != real and hash(stand_in) == hash(stand_in)
        # The stages, and the cache.
        assert stand_in.trace(x).jaxpr.pretty_print() == real.trace(x).jaxpr.pretty_print()
        assert stand_in.lower(x).as_text() == real.lower(x).as_text()
        assert stand_in.eval_shape(x) == real.eval_shape(x)
        assert stand_in._cache_size() == real._cache_size() == 1
        stand_in.clear_cache()
        real.clear_cache()
        assert stand_in._cache_size() == real._cache_size() == 0
        # Copies and pickles: as JAX's own object does, error for error.
        assert copy.copy(stand_in)(x).shape == (4,)
        with pytest.raises(Exception) as theirs:
            pickle.dumps(real)
        with pytest.raises(type(theirs.value)) as ours:
            pickle.dumps(stand_in)
        assert str(ours.value) == str(theirs.value)
    assert len(session.entries) >= 1


# --- lifetimes, against the program run plainly ------------------------------------

MANY_FUNCTIONS = """
import gc, weakref
import jax, jax.numpy as jnp

client = jax.devices()[0].client
facts = []
jnp.ones(8)  # JAX's own broadcast, compiled once: not counted below

# clear_cache frees the executable, with memscope's own references to it.
def fresh():
    @jax.jit
    def h(a, b):
        return a + b * 2.0
    return h

for i in range(5):
    h = fresh()
    gc.collect()
    start = len(client.live_executables())
    h(jnp.ones(8), jnp.ones(8)).block_until_ready()
    gc.collect()
    called = len(client.live_executables())
    h.clear_cache()
    gc.collect()
    facts.append(("clear_cache", called - start, len(client.live_executables()) - start))
    del h

def closure_over(table):
    return lambda x: x @ table + table.sum()

# Many functions in one run, each closing over an array of its own (a table, an
# embedding), called, then dropped: the closed-over array goes at once.
for i in range(12):
    table = jnp.full((32, 32), float(i))
    held = weakref.ref(table)
    f = closure_over(table)
    g = jax.jit(f)
    del table
    x = jnp.ones((4, 32))
    out = g(x); g(x)
    outs = weakref.ref(out)
    ins = weakref.ref(x)
    del f, out, x
    facts.append(("after the call", held() is None, outs() is None, ins() is None))
    del g
    facts.append(("after del g", held() is None))

# jit(f) with no arguments, returning what it closes over (JAX's test).
x = jnp.ones(10)
f = (lambda x: lambda: x)(x)
g = jax.jit(f)
x = weakref.ref(x)
f(); g(); g()
del f
g()
del g
facts.append(("reference dropping", x() is None))

print("\\n".join(map(str, facts)))
"""


@pytest.mark.parametrize("options", [("--advice", "advised"), ("--advice", "full",
                                                                  "--no-remat")])
def test_nothing_the_program_let_go_of_lives_on_under_memscope(tmp_path, options):
    """With the advice measured (the default) and with every donation variant.
    (``--remat`` traces the function again under each checkpoint policy, so it
    holds the function until that is done: docs/how-it-works.md.)"""
    plain, under = _both(tmp_path, MANY_FUNCTIONS, *options)
    assert "('reference dropping', True)" in plain
    assert "('clear_cache', 1, 0)" in plain
    assert under == plain


def test_a_function_dropped_before_its_variants_says_so_and_keeps_its_figures(tmp_path):
    """The program let go of a large function right after calling it: its figures
    are read (they hold nothing of the program's), its variants, which need the
    traced program with the arrays it closes over, are not compiled, and the
    report says why rather than showing no advice."""
    script = tmp_path / "prog.py"
    script.write_text(textwrap.dedent("""
        import gc, weakref, jax, jax.numpy as jnp
        state = {"w": jnp.ones((256, 256)), "b": jnp.ones(256)}
        table = jnp.ones((256, 256))
        held = weakref.ref(table)
        step = jax.jit(lambda s, t=table: jax.tree.map(lambda p: p * (t.sum() + 1.0), s))
        del table
        state = step(state)
        del step
        gc.collect()
        print(held() is None)
    """))
    done = subprocess.run([MEMSCOPE, "run", "-q", "-o", str(tmp_path / "r.json"), str(script)],
                          capture_output=True, text=True, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout == "True\n"
    import json

    (fn,) = json.loads((tmp_path / "r.json").read_text())["functions"]
    assert fn["memory"] is not None and fn["memory"]["peak_bytes"] > 0
    if fn["variants"]:  # the worker was quicker than the program: measured as usual
        assert fn["not_measured"] is None
    else:
        assert fn["not_measured"] == ("the variants were not compiled: the program let go of "
                                      "the function first")


def test_eval_shape_of_a_stand_in_traces_the_function_as_often_as_jax_s_own():
    """``jax.eval_shape(jitted, x)`` takes JAX's own path for a jit object (its
    ``trace``); given the stand-in it would jit it again and run the user's
    function once more (its prints at trace time, JAX's tracing-cache counts)."""
    def traces(make):
        seen = []

        def f(x):
            seen.append(1)
            return x * 2

        g = make(f)
        x = jnp.ones(3)
        assert jax.eval_shape(g, x).shape == (3,)
        g.trace(x)
        return len(seen)

    plain = traces(jax.jit)
    with capture():
        under = traces(jax.jit)
    assert under == plain == 1
