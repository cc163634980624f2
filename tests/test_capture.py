"""Capture: every jit spelling, top-level calls only, and the program left unperturbed."""

from __future__ import annotations

import functools
import gc
import importlib
import sys
import weakref

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from memscope.capturing import capture
from tests.support.versions import jax_since


def _names(session):
    return [(e.name, e.calls) for e in session.entries]


def test_every_jit_spelling_is_captured(tmp_path, monkeypatch):
    (tmp_path / "somelib.py").write_text(
        "import jax\n\n@jax.jit\ndef lib_step(x):\n    return x * 3\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    x = jnp.ones(4)
    with capture() as session:
        from jax import jit

        @jax.jit
        def decorated(x):
            return x + 1

        def plain(x):
            return x + 2

        @functools.partial(jax.jit, static_argnums=(1,))
        def partial_static(x, n):
            return x * n

        @jit
        def imported(x):
            return x - 1

        somelib = importlib.import_module("somelib")
        decorated(x)
        jax.jit(plain, donate_argnums=0)(jnp.ones(4))
        partial_static(x, 2)
        partial_static(x, 2)
        partial_static(x, 5)
        imported(x)
        somelib.lib_step(x)
    sys.modules.pop("somelib", None)
    assert _names(session) == [
        ("decorated", 1), ("plain", 1), ("partial_static", 2),
        ("partial_static", 1), ("imported", 1), ("lib_step", 1)]
    assert [e.signature for e in session.entries if e.name == "partial_static"] == [
        "(float32[4], #1=2)", "(float32[4], #1=5)"]
    assert session.entries[1].facts.program.donated == (True,)


@jax_since((0, 8), "jax.jit(**options) as a decorator factory")
def test_the_decorator_factory_spelling_is_captured():
    with capture() as session:
        @jax.jit(donate_argnames=("x",))
        def factory(x):
            return x + 3

        factory(jnp.ones(4))
    assert _names(session) == [("factory", 1)]
    assert session.entries[0].facts.program.donated == (True,)


def test_calls_made_while_tracing_are_not_entries():
    @jax.jit
    def inner(x):
        return jnp.sin(x)

    with capture() as session:
        inner_c = jax.jit(lambda x: jnp.cos(x))

        @jax.jit
        def outer(x):
            return inner(x) + inner_c(x)

        x = jnp.ones(3)
        outer(x)
        jax.grad(lambda v: inner_c(v).sum())(x)
        jax.vmap(inner_c)(jnp.ones((2, 3)))
        jax.lax.scan(lambda c, v: (c + inner_c(v), None), 0.0, jnp.ones(5))
        inner_c(x)
    assert _names(session) == [("outer", 1), ("<lambda>", 1)]


def test_jax_internal_jits_are_not_user_functions():
    with capture() as session:
        key = jax.random.key(0)
        jax.random.normal(key, (3,))
        jnp.linalg.norm(jnp.ones(3))
    assert session.entries == []


def test_jitted_object_api_is_intact():
    def step(x, y):
        """Doc of step."""
        return x * y

    step.custom = "attribute"
    with capture() as session:
        f = jax.jit(step, donate_argnums=0)
    x, y = jnp.ones(3), jnp.ones(3)
    assert f.__wrapped__ is step
    assert (f.__name__, f.__doc__, f.custom) == ("step", "Doc of step.", "attribute")
    assert f.lower(x, y).compile().memory_analysis() is not None
    assert f.trace(x, y).out_info.shape == (3,)
    assert f.eval_shape(x, y).shape == (3,)
    assert f.__module__ == step.__module__
    f.clear_cache()
    assert "PjitFunction" in repr(f)
    assert not session.entries  # none of these is a call


def test_jitted_method_binds_like_jax_jit():
    with capture() as session:
        class Model:
            scale = 2.0

            @functools.partial(jax.jit, static_argnums=0)
            def apply(self, x):
                return x * self.scale

            def __hash__(self):
                return 0

            def __eq__(self, other):
                return isinstance(other, Model)

        out = Model().apply(jnp.ones(2))
    np.testing.assert_array_equal(out, [2.0, 2.0])
    assert _names(session) == [("apply", 1)]


def test_results_are_identical_and_the_function_is_traced_once(capsys):
    def make_step():
        def step(params, x):
            print("tracing step")
            return jax.tree.map(lambda p: p - 0.1 * jnp.tanh(x @ p).sum(), params)
        return step

    params = {"w": jnp.arange(16.0).reshape(4, 4) / 16}
    x = jnp.ones((2, 4))
    expected = jax.jit(make_step())(params, x)
    capsys.readouterr()
    with capture() as session:
        f = jax.jit(make_step())
        got = f(params, x)
        f(params, x)
    # Reading the compiled program reuses JAX's trace: the user's code runs once.
    assert capsys.readouterr().out == "tracing step\n"
    np.testing.assert_array_equal(got["w"], expected["w"])
    assert session.entries[0].facts is not None


def test_no_user_array_is_kept_alive():
    with capture() as session:
        f = jax.jit(lambda a, b: (a * 2, b), donate_argnums=0)
        a, b = jnp.ones(1000), jnp.ones(10)
        out = f(a, b)
        refs = [weakref.ref(x) for x in (a, b, *out)]
        del a, b, out
        gc.collect()
    assert session.entries and session.entries[0].facts is not None
    assert [r() for r in refs] == [None] * 4


def test_recreated_jits_of_one_function_share_an_entry():
    def step(x):
        return x + 1

    x = jnp.ones(3)
    with capture() as session:
        for _ in range(3):
            jax.jit(step)(x)
    assert _names(session) == [("step", 3)]


def test_unhashable_static_argument_fails_as_in_jax():
    f_plain = jax.jit(lambda x, cfg: x, static_argnums=1)
    with pytest.raises(ValueError) as plain_error:
        f_plain(jnp.ones(2), [1, 2])
    with capture() as session:
        f = jax.jit(lambda x, cfg: x, static_argnums=1)
        with pytest.raises(ValueError) as captured_error:
            f(jnp.ones(2), [1, 2])
    assert str(captured_error.value) == str(plain_error.value)
    assert session.entries == []


def test_calls_after_the_capture_pass_through():
    with capture() as session:
        f = jax.jit(lambda x: x + 1)
        f(jnp.ones(2))
    f(jnp.ones(2))
    assert _names(session) == [("<lambda>", 1)]
