"""The small programs the compile tests share, JAX's own figures for them, and
XLA's compiles counted: ``step`` (a training step the advice and worker tests
compile under each donation), ``update`` (one large enough for the early
compile's prediction), ``count_compiles`` and ``without_the_assignment`` (XLA:CPU
read as XLA:GPU's plugin is)."""

from __future__ import annotations

import warnings
from collections.abc import Callable

import jax
import jax.numpy as jnp
import pytest
from jax import monitoring

from memscope import _compat
from memscope.compiled.targets import here
from tests.support.truth import expected_peak

#: XLA compiles memscope adds per captured function to read its buffer
#: assignment: none where ``memory_analysis()`` carries it (XLA:CPU), else one
#: with XLA's dump (XLA:GPU; memscope.compiled.read.read_stages)
DUMPED = 0 if here.assignment_in_memory_analysis(jax.jit(lambda x: x).lower(1.0)) else 1
FIGURES = {"argument_bytes": "argument_size_in_bytes", "output_bytes": "output_size_in_bytes",
           "alias_bytes": "alias_size_in_bytes", "temp_bytes": "temp_size_in_bytes",
           "xla_peak_bytes": "peak_memory_in_bytes"}


def step(params, opt_state, batch):
    """A small training step: parameters and optimizer state in, both updated out."""
    grads = jax.tree.map(lambda p: p * jnp.mean(batch), params)
    new_params = jax.tree.map(lambda p, g: p - 0.1 * g, params, grads)
    new_opt = jax.tree.map(lambda o, g: 0.9 * o + g, opt_state, grads)
    return new_params, new_opt, jnp.mean(batch)


def args():
    """``step``'s parameters, optimizer state and batch."""
    params = {"w": jnp.ones((128, 64)), "b": jnp.ones(64)}
    opt_state = {"w": jnp.zeros((128, 64)), "b": jnp.zeros(64)}
    return params, opt_state, jnp.ones((16, 128))


def direct_figures(donate):
    """JAX's own figures for ``step`` compiled with ``donate_argnums=donate``."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        stats = jax.jit(step, donate_argnums=donate).lower(*args()).compile().memory_analysis()
    # memscope's peak is held to XLA's own figures (tests.support.truth.expected_peak)
    return {**{ours: getattr(stats, theirs) for ours, theirs in FIGURES.items()},
            "peak_bytes": expected_peak(stats)}


def figures(memory):
    """memscope's figures of a compile, by the names ``direct_figures`` gives."""
    return {name: getattr(memory, name) for name in (*FIGURES, "peak_bytes")}


LEAVES, SIZE, STEPS = 8, 256, 15  # 8 x 256 KiB of parameters, 2 MiB with the state
traces: list[int] = []


def update(params, state, x):
    """Enough equations for the early compile to be predicted (memscope.variants.early);
    each trace appends to ``traces``."""
    traces.append(1)
    for _ in range(STEPS):  # unrolled: a few hundred equations, as a model's step has
        state = [0.9 * s + 0.1 * jnp.tanh(p * x) for s, p in zip(state, params, strict=True)]
        params = [p - 1e-3 * s for p, s in zip(params, state, strict=True)]
    return params, state, sum(jnp.sum(p) for p in params)


def update_arguments():
    """``update``'s parameters, optimizer state and input."""
    params = [jnp.full((SIZE, SIZE), 0.5 + i, jnp.float32) for i in range(LEAVES)]
    return params, [jnp.zeros_like(p) for p in params], jnp.float32(0.25)


def update_direct(donate):
    """JAX's own figures for ``update`` compiled with ``donate_argnums=donate``."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        stats = jax.jit(update, donate_argnums=donate).lower(*update_arguments()).compile(
        ).memory_analysis()
    return {"argument_bytes": stats.argument_size_in_bytes,
            "output_bytes": stats.output_size_in_bytes,
            "alias_bytes": stats.alias_size_in_bytes,
            "temp_bytes": stats.temp_size_in_bytes, "peak_bytes": expected_peak(stats)}


COMPILE_EVENT = "/jax/core/compile/backend_compile_duration"
_compiles: list[str] = []
monitoring.register_event_duration_secs_listener(
    lambda name, secs, **kw: _compiles.append(name) if name == COMPILE_EVENT else None)


def count_compiles(run: Callable[[], object]) -> int:
    """How many programs XLA compiled while ``run()`` ran (JAX's monitoring events)."""
    before = len(_compiles)
    run()
    return len(_compiles) - before


def without_the_assignment(monkeypatch: pytest.MonkeyPatch) -> None:
    """XLA:CPU read as XLA:GPU's plugin is: ``memory_analysis()`` and the
    serialized executable carry no buffer assignment, XLA's dump does."""
    monkeypatch.setattr(_compat.executables, "buffer_assignment_bytes", lambda stats: None)
    monkeypatch.setattr(_compat.executables, "serialized_executable_payloads", lambda compiled: ())
    monkeypatch.setattr(here, "assignment_in_memory_analysis", lambda lowered: False)
