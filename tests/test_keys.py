"""One entry per program JAX compiles: never two programs merged, never one split.

Ground truth is JAX's own: each entry's figures equal
``jax.jit(...).lower(...).compile().memory_analysis()`` of that very program.
"""

from __future__ import annotations

import copy
import functools
import gc
import pickle
import sys
import weakref

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from jax.sharding import AxisType, NamedSharding
from jax.sharding import PartitionSpec as P

from memscope.assemble.function import function_report
from memscope.capturing import capture
from memscope.program.sites import library
from tests.support.versions import jax_since


def _output_bytes(fn, *args):
    return fn.lower(*args).compile().memory_analysis().output_size_in_bytes


def tile(x, k):
    return jnp.tile(x, k)


def test_closures_over_different_values_are_different_programs():
    def make(k):
        return jax.jit(lambda x: jnp.tile(x, k))

    x = jnp.ones(4)
    with capture() as session:
        make(1)(x)
        make(250_000)(x)
        make(1)(x)  # the same program again: counted with the first
    truth = [_output_bytes(make(k), x) for k in (1, 250_000)]
    assert [e.facts.memory.output_bytes for e in session.entries] == truth
    assert [e.calls for e in session.entries] == [2, 1]


def test_partials_with_different_arguments_are_different_programs():
    x = jnp.ones(4)
    with capture() as session:
        jax.jit(functools.partial(tile, k=1))(x)
        jax.jit(functools.partial(tile, k=100_000))(x)
    truth = [_output_bytes(jax.jit(functools.partial(tile, k=k)), x) for k in (1, 100_000)]
    assert [e.facts.memory.output_bytes for e in session.entries] == truth


def test_equal_shardings_spelled_differently_are_one_entry():
    mesh = jax.make_mesh((1,), ("d",), axis_types=(AxisType.Auto,))
    a = jax.device_put(jnp.ones(8), NamedSharding(mesh, P()))
    b = jax.device_put(jnp.ones(8), NamedSharding(mesh, P(None)))
    assert a.sharding != b.sharding and a.sharding.is_equivalent_to(b.sharding, 1)
    with capture() as session:
        f = jax.jit(lambda x: x * 2)
        f(a)
        f(b)
    assert [e.calls for e in session.entries] == [2]


class Model:
    def __init__(self, scale):
        self.scale = scale

    def __hash__(self):
        return hash(self.scale)

    def __eq__(self, other):
        return isinstance(other, Model) and other.scale == self.scale


class BadRepr(Model):
    def __repr__(self):
        raise RuntimeError("no repr for you")




def test_static_names_have_no_address_and_a_raising_repr_does_not_break_the_call():
    x = jnp.arange(4.0)
    with capture() as session:
        apply = jax.jit(lambda m, x: x * m.scale, static_argnums=0)
        first = apply(Model(2.0), x)
        second = apply(BadRepr(3.0), x)
    np.testing.assert_array_equal(first, x * 2.0)
    np.testing.assert_array_equal(second, x * 3.0)
    assert [e.signature for e in session.entries] == ["(float32[4], #0=<Model>)",
                                                      "(float32[4], #0=<BadRepr>)"]


@jax_since((0, 9), "jax.clear_caches() releasing static arguments (0.7 and 0.8 keep them "
                   "themselves)")
def test_static_arguments_are_not_kept_alive_after_jax_clears_its_caches():
    x = jnp.ones(4)
    with capture() as session:
        apply = jax.jit(lambda m, x: x * m.scale, static_argnums=0)
        model = Model(2.0)
        seen = weakref.ref(model)
        apply(model, x)
        del model
        jax.clear_caches()
        gc.collect()
        assert seen() is None
    assert session.entries[0].calls == 1


def test_numpy_inputs_show_the_dtype_the_program_uses():
    with capture() as session:
        f = jax.jit(lambda x: x + 1)
        f(np.ones(3))                    # float64 numpy
        f(np.ones(3, dtype=np.float32))  # the same program with x64 off
    compiled = jax.jit(lambda x: x + 1).lower(np.ones(3)).compile()
    (info,), _ = compiled.args_info
    assert session.entries[0].signature == f"({info.dtype}[3])"
    assert [e.calls for e in session.entries] == [2]


def test_the_stand_in_copies_and_pickles_as_the_jit_object_does():
    def double(x):
        return x * 2

    original = jax.jit(double)
    with capture() as session:
        measured = jax.jit(double)
        for make_copy in (copy.copy, copy.deepcopy):
            twin = make_copy(measured)
            np.testing.assert_array_equal(twin(jnp.ones(2)), make_copy(original)(jnp.ones(2)))
    assert sum(e.calls for e in session.entries) == 2
    errors = []
    for jitted in (original, measured):
        try:
            pickle.dumps(jitted)
            errors.append(None)
        except Exception as e:  # where JAX's own does not pickle, neither may ours
            errors.append((type(e), str(e)))
    assert errors[0] == errors[1]


def test_calls_through_an_ahead_of_time_compiled_object_are_captured():
    x = jnp.ones((64, 64))
    pointer = x.unsafe_buffer_pointer()
    with capture() as session:
        compiled = jax.jit(lambda x: x * 2, donate_argnums=0).lower(x).compile()
        assert isinstance(compiled, jax.stages.Compiled)
        y = compiled(x)
        compiled(y)
    assert x.is_deleted() and y.is_deleted()
    (entry,) = session.entries
    truth = compiled.memory_analysis()
    assert (entry.calls, entry.signature) == (2, "(float32[64,64])")
    assert entry.facts.memory.alias_bytes == truth.alias_size_in_bytes > 0
    assert entry.facts.memory.temp_bytes == truth.temp_size_in_bytes
    fn = function_report(entry)
    assert [b.fate for b in fn.inputs] == ["aliased"]
    assert entry.observation.outputs_after == ((pointer,),)


def test_library_jits_are_marked_and_get_no_advice():
    params = {"w": jnp.ones(4)}
    update = optax.clip_by_global_norm(1.0).update
    assert library(update) == "optax"
    # A jit made by no line of the user's (code compiled as a frozen module's)
    # of a function optax defines is optax's: reported, with no advice.
    namespace = {"jax": jax, "update": update}
    with capture(advise=True) as session:
        exec(compile("clip = jax.jit(update)", "<frozen optax>", "exec"), namespace)
        namespace["clip"](params, optax.EmptyState())
        jax.jit(lambda p: jax.tree.map(lambda v: v * 2, p))(params)
    library_fn, user_fn = (function_report(e) for e in session.entries)
    assert library_fn.library == "optax" and library_fn.jit_site is None
    assert (library_fn.variants, library_fn.advice) == ((), None)
    assert user_fn.library is None and user_fn.variants


def test_a_librarys_function_jitted_at_the_users_line_is_the_users():
    """The user's own ``jax.jit(...)`` of a function an installed package made
    (one factory's closure for every call of it): the jit call names it, and
    the user can edit it, so it gets the advice."""
    params = {"w": jnp.ones(4)}
    with capture(advise=True) as session:
        line = sys._getframe().f_lineno + 1
        clip = jax.jit(optax.clip_by_global_norm(1.0).update)
        clip(params, optax.EmptyState())
    (fn,) = (function_report(e) for e in session.entries)
    assert fn.library is None and fn.variants
    assert fn.source == fn.jit_site == f"tests/test_keys.py:{line}"


@pytest.mark.parametrize("fun", [tile, functools.partial(tile, k=2)])
def test_the_user_s_own_functions_are_not_library(fun):
    assert library(fun) is None


def test_ahead_of_time_from_shapes_alone_reads_the_program_compiled():
    shape = jax.ShapeDtypeStruct((8, 16), jnp.float32)
    with capture(advise=True) as session:
        compiled = jax.jit(lambda x: jnp.tanh(x) @ x.T).trace(shape).lower().compile()
        compiled(jnp.ones((8, 16)))
    (entry,) = session.entries
    truth = compiled.memory_analysis()
    assert entry.signature == "(float32[8,16])"
    assert entry.facts.memory.output_bytes == truth.output_size_in_bytes
    assert entry.facts.memory.temp_bytes == truth.temp_size_in_bytes
    assert [v.name for v in entry.variants][:2] == ["none", "all"]


def test_two_runs_with_a_static_self_compare_function_by_function(tmp_path):
    import subprocess

    from memscope.report import load_report
    from tests.support.cli import MEMSCOPE, PROGRAM_ENV

    script = tmp_path / "model.py"
    script.write_text(
        "import functools, jax, jax.numpy as jnp\n"
        "class Model:\n"
        "    @functools.partial(jax.jit, static_argnums=0)\n"
        "    def apply(self, x):\n"
        "        return x * 2\n"
        "Model().apply(jnp.ones(4))\n")
    for name in ("a.json", "b.json"):
        done = subprocess.run([MEMSCOPE, "run", "-q", "-o", str(tmp_path / name), str(script)],
                              env=PROGRAM_ENV, capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr
    first, second = (load_report(str(tmp_path / n)) for n in ("a.json", "b.json"))
    assert [f.signature for f in first.functions] == ["(float32[4], #0=<Model>)"]
    assert [f.signature for f in second.functions] == [f.signature for f in first.functions]
    done = subprocess.run([MEMSCOPE, "check", "--report", str(tmp_path / "b.json"),
                           "--baseline", str(tmp_path / "a.json")], env=PROGRAM_ENV,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "new" not in done.stdout.lower() and "vanished" not in done.stdout.lower()
