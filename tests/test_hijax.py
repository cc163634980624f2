"""Hijax values (Flax's hijax ``nnx.Variable``) given to ``jax.jit`` or closed over.

A hijax value is one leaf to JAX's pytrees and its trace, and several arrays to
the compiled program: JAX lowers the traced jaxpr to one over the arrays of each
hijax type. On JAX 0.7 to 0.10 Flax's hijax Variables are mutable: each one the
program takes, or closes over, also gives ``main`` results of its own, its
arrays' new values, which JAX writes back into the Variable after the call. The
ground truth is JAX's: its own compile of the same call (``memory_analysis()``),
the lowered ``main``'s arguments, results and aliases, the Variable's arrays
after the call (deleted, and at which address), and XLA's compile count.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import pytest
from jax import monitoring

from memscope.assemble.function import function_report
from memscope.capturing import capture
from memscope.report import FunctionReport
from tests.support.versions import jax_before

nnx = pytest.importorskip("flax.nnx", reason="hijax Variables are Flax NNX's")

#: JAX 0.11 has no mutable hijax type: Flax's hijax Variables are read-only inside jit.
MUTABLE = jax_before((0, 11), "mutable hijax types (a hijax Variable updated inside jit)")

BACKEND_COMPILE = "/jax/core/compile/backend_compile_duration"
_events: list[str] = []
monitoring.register_event_duration_secs_listener(lambda name, secs, **kw: _events.append(name))


def hijax(value: Any, kind: Any = None) -> Any:
    """A hijax Variable holding ``value``, or a skip where this Flax makes none."""
    try:
        v = (kind or nnx.Param)(value, hijax=True)
    except Exception as e:  # flax 0.12.6 on JAX 0.8: its hijax Variable needs a newer JAX
        pytest.skip(f"this Flax makes no hijax Variable on JAX {jax.__version__}: {e}")
    if type(v).__name__ != "HijaxVariable":  # flax 0.12.0 (JAX 0.7) ignores hijax=True
        pytest.skip("this Flax has no hijax Variable")
    return v


def captured(make: Callable[[], Any], *args: Any, calls: int = 1, **options: Any
             ) -> tuple[FunctionReport, int]:
    """Jit with ``make()`` inside a capture (``options``) and call it ``calls``
    times: its report, and the XLA compiles made from the jit to the end of the calls."""
    with capture(**options) as session:
        before = _events.count(BACKEND_COMPILE)
        f = make()
        for _ in range(calls):
            jax.block_until_ready(f(*args))
        compiles = _events.count(BACKEND_COMPILE) - before
    (entry,) = session.entries
    return function_report(entry), compiles


def compiles_plainly(make: Callable[[], Any], *args: Any, calls: int = 1) -> int:
    before = _events.count(BACKEND_COMPILE)
    f = make()
    for _ in range(calls):
        jax.block_until_ready(f(*args))
    return _events.count(BACKEND_COMPILE) - before


def assert_figures(fn: FunctionReport, stats: Any) -> None:
    """memscope's figures are the ones of JAX's own compile (``stats``)."""
    assert fn.error is None and fn.memory is not None
    assert (fn.memory.argument_bytes, fn.memory.output_bytes, fn.memory.alias_bytes,
            fn.memory.temp_bytes) == (stats.argument_size_in_bytes, stats.output_size_in_bytes,
                                      stats.alias_size_in_bytes, stats.temp_size_in_bytes)


def main_of(lowered: Any) -> tuple[list[str], dict[int, int]]:
    """The lowered ``main``'s result types, and ``{argument: result}`` of its aliases."""
    text = lowered.as_text()
    header = next(line for line in text.splitlines() if "func.func public @main" in line)
    params, results = header.split(") -> (")
    aliases = {int(a): int(r) for a, r in
               re.findall(r"%arg(\d+): [^%]*?tf\.aliasing_output = (\d+)", params)}
    return re.findall(r"tensor<[^>]*>", results), aliases


# --- a hijax Variable given to the function -------------------------------------------


def _read(v: Any, x: Any) -> Any:
    return v["a"] * 2 + x, v["b"] + 1


def test_a_hijax_variable_argument_is_read_as_its_arrays_named_by_their_paths():
    v = hijax({"a": jnp.ones((32, 16)), "b": jnp.ones((5,))})
    x = jnp.ones((32, 16))
    lowered = jax.jit(_read).lower(v, x)
    results, aliases = main_of(lowered)

    fn, _ = captured(lambda: jax.jit(_read), v, x)

    assert_figures(fn, lowered.compile().memory_analysis())
    assert fn.signature == "(Param{float32[32,16], float32[5]}, float32[32,16])"
    assert [(b.path, b.shape, b.parameter) for b in fn.inputs] == [
        ("v.value['a']", v["a"].shape, 0), ("v.value['b']", v["b"].shape, 1), ("x", x.shape, 2)]
    assert aliases == {} and all(b.fate == "not_donated" for b in fn.inputs)
    # One output per result of JAX's main: where the Variable is mutable (JAX 0.7
    # to 0.10), first its arrays' new values, written back into it; the call's two.
    own = ["result[0]", "result[1]"]
    written = ["v.value['a'] (written back)", "v.value['b'] (written back)"]
    assert [o.path for o in fn.outputs] == (own if len(results) == 2 else written + own)
    assert len(fn.outputs) == len(results)
    assert fn.findings == ()


@MUTABLE
def test_a_donated_hijax_variable_takes_its_new_value_in_place():
    v = hijax({"a": jnp.ones((64, 64)), "b": jnp.ones((64,))})
    x = jnp.ones((64, 64))

    def update(v: Any, x: Any) -> Any:
        v["a"] = v["a"] + x
        return x.sum()

    donated = jax.jit(update, donate_argnums=0).lower(v, x)
    plain = jax.jit(update).lower(v, x)
    results, aliases = main_of(donated)
    old_a, old_b = v["a"], v["b"]
    address = old_a.unsafe_buffer_pointer()

    fn, _ = captured(lambda: jax.jit(update, donate_argnums=0), v, x)

    # JAX: the Variable's arrays are aliased to its new values, the first results
    # of main; the call deleted the old ones, and v holds the new one at the old address.
    assert aliases == {0: 0, 1: 1} and len(results) == 3
    assert old_a.is_deleted() and old_b.is_deleted()
    assert v["a"].unsafe_buffer_pointer() == address and float(v["a"][0, 0]) == 2.0
    assert_figures(fn, donated.compile().memory_analysis())
    inputs = {b.path: b for b in fn.inputs}
    for leaf in ("v.value['a']", "v.value['b']"):
        b = inputs[leaf]
        assert (b.fate, b.output, b.observed, b.deleted) == (
            "aliased", f"{leaf} (written back)", "confirmed", True)
    assert [(o.path, o.fate) for o in fn.outputs] == [
        ("v.value['a'] (written back)", "reuses_input"),
        ("v.value['b'] (written back)", "reuses_input"), ("result", "new")]
    assert fn.findings == ()

    # Not donated, the same Variable is a candidate, and the advised setting is
    # JAX's own compile with it donated.
    undonated, _ = captured(lambda: jax.jit(update), v, x, advise="advised")
    assert_figures(undonated, plain.compile().memory_analysis())
    assert {b.path: b.candidate for b in undonated.inputs} == {
        "v.value['a']": True, "v.value['b']": True, "x": False}
    advised = undonated.variant("advised")
    assert advised is not None and advised.setting == 'donate_argnames=("v",)'
    assert advised.memory is not None
    assert advised.memory.alias_bytes == donated.compile().memory_analysis().alias_size_in_bytes


@MUTABLE
def test_a_variable_that_gains_an_array_is_read_as_the_program_the_call_ran():
    x = jnp.ones((4, 5))

    def record(x: Any, metrics: Any) -> None:
        metrics["x_sum"] = jnp.sum(x)

    # JAX's compile of the call as it was made: metrics empty before it.
    stats = jax.jit(record).lower(x, hijax({}, nnx.Variable)).compile().memory_analysis()
    metrics = hijax({}, nnx.Variable)

    fn, _ = captured(lambda: jax.jit(record), x, metrics)

    assert float(metrics["x_sum"]) == 20.0
    assert_figures(fn, stats)
    assert [b.path for b in fn.inputs] == ["x"]
    assert [(o.path, o.fate) for o in fn.outputs] == [
        ("metrics.value['x_sum'] (written back)", "new")]
    assert fn.findings == ()  # the run's buffers line up with the program read


# --- hijax Variables the function closes over -----------------------------------------


@MUTABLE
def test_closed_over_hijax_variables_are_named_and_read_without_a_second_compile():
    count = hijax(jnp.array(0), nnx.Variable)
    w = hijax({"a": jnp.ones((16, 16)), "b": jnp.ones((16,))})
    x = jnp.ones((8, 16))

    def make() -> Any:  # a function object of its own: JAX compiles it anew
        def step(x: Any) -> Any:
            count[...] += 1
            w["a"] = w["a"] * 0.5
            return x @ w["a"]
        return jax.jit(step)

    # The same program with the Variables' arrays passed first, as JAX passes them
    # (JAX's own step.lower(x) fails here on these versions: "Too many leaves for
    # PyTreeDef", Traced.lojax counting the hoisted Variables as the call's).
    def explicit(c: Any, a: Any, b: Any, x: Any) -> Any:
        return c + 1, a * 0.5, b, x @ (a * 0.5)

    expected = jax.jit(explicit).lower(count[...], w["a"], w["b"], x)
    results, _ = main_of(expected)
    plain = compiles_plainly(make, x, calls=3)

    fn, compiles = captured(make, x, calls=3)

    assert int(count[...]) == 6  # three plain calls, three measured
    assert compiles == plain == 1  # memscope read the executable JAX compiled
    assert_figures(fn, expected.compile().memory_analysis())
    assert [b.path for b in fn.inputs] == ["x"]
    closed = [(b.path, b.fate, b.parameter) for b in fn.closed_over_refs]
    assert closed == [("count.value", "not_donated", 0), ("w.value['a']", "not_donated", 1),
                      ("w.value['b']", "not_donated", 2)]
    assert all("closes over it" in (b.reason or "") for b in fn.closed_over_refs)
    assert [(o.path, o.fate, o.input) for o in fn.outputs] == [
        ("count.value (written back)", "new", None),
        ("w.value['a'] (written back)", "new", None),
        ("w.value['b'] (written back)", "copy_of_input", "w.value['b']"), ("result", "new", None)]
    assert len(fn.outputs) == len(results)
    assert fn.findings == ()
