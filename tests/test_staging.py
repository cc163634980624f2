"""Staging a captured jit inside another trace is JAX's business alone.

A stand-in's ``.trace()``, ``.lower()``, ``.eval_shape()`` and calls, made with
tracers (inside ``jax.eval_shape``, a ``scan`` or ``while_loop`` body,
``jax.checkpoint``, ``grad``), abstract values or concrete arrays, behave as on
the jit object JAX made; memscope records only the top-level, concrete calls.
Each pattern is checked against the same code run without memscope, and the
programs together run under ``python`` and ``memscope run`` with the same output.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import memscope
from tests.support.cli import MEMSCOPE, PROGRAM_ENV


def _staged_programs() -> dict[str, Any]:
    """Each pattern as a function of nothing, returning plain numbers to compare."""
    double = jax.jit(lambda x: x * 2)

    def eval_shape_of_stand_in() -> Any:
        shape = jax.eval_shape(double, jnp.ones(3))
        lowered = jax.eval_shape(lambda x: (double.lower(x), x)[1], jnp.ones(3))
        traced = jax.eval_shape(lambda x: (double.trace(x), double.eval_shape(x))[1],
                                jnp.ones(3))
        return [shape.shape, str(shape.dtype), lowered.shape, traced.shape]

    def trace_in_checkpointed_scan() -> Any:
        def body(carry: Any, x: Any) -> Any:
            double.trace(carry)
            double.lower(carry)
            return double(carry) + x, x

        carry, ys = jax.lax.scan(jax.checkpoint(body), jnp.ones(3), jnp.arange(4.0))
        return np.asarray(carry).tolist(), np.asarray(ys).tolist()

    def trace_in_while_loop() -> Any:
        def body(c: Any) -> Any:
            double.trace(c)
            return double(c) + 1

        return np.asarray(jax.lax.while_loop(lambda c: c[0] < 10, body, jnp.zeros(3))).tolist()

    def lower_under_grad() -> Any:
        def loss(x: Any) -> Any:
            double.lower(x).as_text()
            return jnp.sum(double(x) ** 2)

        return np.asarray(jax.jit(jax.grad(loss))(jnp.arange(3.0))).tolist()

    def multisteps_compiled_ahead() -> Any:
        opt = optax.MultiSteps(optax.adam(1e-2), every_k_schedule=2)
        params = {"w": jnp.ones((4, 4))}
        state = opt.init(params)

        @jax.jit
        def step(params: Any, state: Any, x: Any) -> Any:
            grads = jax.grad(lambda p: jnp.sum(jnp.tanh(p["w"] @ x)))(params)
            updates, state = opt.update(grads, state, params)
            return optax.apply_updates(params, updates), state

        compiled = step.lower(params, state, jnp.ones(4)).compile()
        for _ in range(3):
            params, state = compiled(params, state, jnp.ones(4))
        return np.asarray(params["w"]).round(6).tolist()

    return {f.__name__: f for f in (eval_shape_of_stand_in, trace_in_checkpointed_scan,
                                    trace_in_while_loop, lower_under_grad,
                                    multisteps_compiled_ahead)}


@pytest.mark.parametrize("name", list(_staged_programs()))
def test_staging_inside_a_trace_behaves_as_without_memscope(name: str) -> None:
    expected = _staged_programs()[name]()
    with memscope.capture() as session:
        got = _staged_programs()[name]()
    assert got == expected
    # Top-level calls are still recorded, with their compiled figures.
    assert all(e.error is None for e in session.entries), [e.error for e in session.entries]


def test_staged_calls_are_not_recorded_and_top_level_ones_are() -> None:
    with memscope.capture() as session:
        double = jax.jit(lambda x: x * 2)
        jax.eval_shape(double, jnp.ones(3))
        jax.jit(lambda x: double(x) + 1)(jnp.ones(3))
        double.trace(jnp.ones(5))  # a top-level stage: nothing runs, nothing recorded
        double(jnp.ones(7))
    names = [(e.name, e.signature, e.calls) for e in session.entries]
    assert ("<lambda>", "(float32[7])", 1) in names
    assert not any(sig == "(float32[5])" for _, sig, _ in names)
    assert len(names) == 2  # the outer lambda and double at float32[7]


def test_the_stand_in_s_stages_are_jax_s_own_inside_a_trace() -> None:
    seen: list[type] = []
    with memscope.capture():
        double = jax.jit(lambda x: x * 2)

        def body(x: Any) -> Any:
            seen.append(type(double.trace(x)))
            seen.append(type(double.lower(x)))
            return x

        jax.eval_shape(body, jnp.ones(3))
    assert seen == [jax.stages.Traced, jax.stages.Lowered]


def test_the_patterns_run_alike_under_python_and_memscope_run(tmp_path: Path) -> None:
    path = tmp_path / "staged.py"
    path.write_text(textwrap.dedent("""\
        from tests.test_staging import _staged_programs
        for name, program in _staged_programs().items():
            print(name, program())
    """))
    env = {**PROGRAM_ENV, "PYTHONPATH": str(Path(__file__).parent.parent)}
    plain = subprocess.run([sys.executable, str(path)], env=env, capture_output=True,
                           text=True, timeout=300)
    measured = subprocess.run([MEMSCOPE, "run", "-q", str(path)], env=env,
                              capture_output=True, text=True, timeout=300)
    assert plain.returncode == 0, plain.stderr
    assert (measured.returncode, measured.stdout) == (0, plain.stdout), measured.stderr


def test_jits_of_one_code_reading_different_globals_are_two_entries() -> None:
    # JAX compiles one program per function object; two lambdas of one code
    # compile two programs when the globals they read differ, and memscope's
    # entries follow what XLA compiled (the executables' fingerprints).
    source = textwrap.dedent("""\
        made = []
        for size in (3, 5):
            W = jnp.ones(size)
            made.append(jax.jit(lambda x: x + W.sum()))
            made[-1](jnp.ones(3))
        alike = [jax.jit(lambda x: x * 2) for _ in range(3)]
        for g in alike:
            g(jnp.ones(3))
        def f(x):
            return x - 1
        for _ in range(3):
            jax.jit(f)(jnp.ones(3))
    """)
    with memscope.capture() as session:
        exec(source, {"jax": jax, "jnp": jnp})
    calls = sorted((e.name, e.calls, e.facts is not None) for e in session.entries)
    assert calls == [("<lambda>", 1, True), ("<lambda>", 1, True), ("<lambda>", 3, True),
                     ("f", 3, True)]


COUNTED_LOWERING = """\
import jax, jax.numpy as jnp
from jax.extend.core import Primitive
from jax.interpreters import mlir

lowerings = 0
p = Primitive("counted_identity")
p.def_impl(lambda x: x)
p.def_abstract_eval(lambda x: x)

def lowering(ctx, x):
    global lowerings
    lowerings += 1
    return [x]

mlir.register_lowering(p, lowering)

@jax.jit
def f(x):
    return p.bind(x) * 2

f(jnp.ones(3))
f(jnp.ones(3))
import time; time.sleep(0.5)  # room for memscope's worker, had it lowered now
print("lowerings:", lowerings)
"""


# Equinox's spelling: the rule is JAX's mlir.lower_fun around the program's impl.
LOWER_FUN = COUNTED_LOWERING.replace("""def lowering(ctx, x):
    global lowerings
    lowerings += 1
    return [x]

mlir.register_lowering(p, lowering)""", """def impl(x):
    global lowerings
    lowerings += 1
    return x

mlir.register_lowering(p, mlir.lower_fun(impl, multiple_results=False))""")


@pytest.mark.parametrize("program", [COUNTED_LOWERING, LOWER_FUN], ids=["rule", "lower_fun"])
def test_a_program_s_own_lowering_rule_runs_as_often_as_under_python(
        tmp_path: Path, program: str) -> None:
    # Lowering a donation variant runs every lowering rule again; a custom
    # primitive's rule is the program's code (Equinox's tests count them), so
    # those variants are compiled once the program has ended.
    assert program.count("lowerings += 1") == 1
    path = tmp_path / "counted.py"
    path.write_text(program)
    report = tmp_path / "report.json"
    plain = subprocess.run([sys.executable, str(path)], env=PROGRAM_ENV, capture_output=True,
                           text=True, timeout=300)
    measured = subprocess.run([MEMSCOPE, "run", "-q", "--advice", "full", "-o", str(report),
                               str(path)], env=PROGRAM_ENV, capture_output=True, text=True, timeout=300)
    assert plain.returncode == 0, plain.stderr
    assert plain.stdout == "lowerings: 1\n"
    assert (measured.returncode, measured.stdout) == (0, plain.stdout), measured.stderr
    # ...and the variants are still measured, after the end.
    (function,) = memscope.load_report(report).functions
    assert function.memory is not None
    assert {v.name for v in function.variants} >= {"none", "all"}
