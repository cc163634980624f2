"""Roles inside loops (issue 66): an Equinox GRU cell scanned over time inside a
module, the module vmapped over the batch, under eqx.filter_jit with optax adam.
The per-time-step residuals the backward loop reads are activations, named by
the user's scan line; what cannot be told is at most 5% of the peak."""

from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from memscope.compiled.targets import gpu
from memscope.flow import analyze

HIDDEN, SEQ, BATCH, FEATURES = 32, 16, 8, 4
SCAN_LINE = "h, _ = jax.lax.scan(step, jnp.zeros(HIDDEN), xs)"


SPREAD_LINE = "spread = jax.lax.stop_gradient(jnp.sort(jnp.outer(h, jnp.arange(512.0))))"


class _GRU(eqx.Module):
    cell: eqx.nn.GRUCell
    out: eqx.nn.Linear
    #: a large value each forward step makes and the backward pass never reads
    #: (sorted, so XLA cannot fuse it away): the peak falls inside the forward
    #: loop, its residuals half filled, on every JAX series
    spread: bool = eqx.field(static=True)

    def __init__(self, key, spread=False):
        k1, k2 = jax.random.split(key)
        self.cell = eqx.nn.GRUCell(FEATURES, HIDDEN, key=k1)
        self.out = eqx.nn.Linear(HIDDEN, 1, key=k2)
        self.spread = spread

    def __call__(self, xs):
        def step(h, x):
            h = self.cell(x, h)
            if self.spread:
                spread = jax.lax.stop_gradient(jnp.sort(jnp.outer(h, jnp.arange(512.0))))
                h = h + 0.0 * spread[:, 0]
            return h, None

        h, _ = jax.lax.scan(step, jnp.zeros(HIDDEN), xs)
        return self.out(h)


_OPT = optax.adam(1e-3)


def _train_step(model, opt_state, x, y):
    def loss(m):
        return jnp.mean((jax.vmap(m)(x) - y) ** 2)

    value, grads = eqx.filter_value_and_grad(loss)(model)
    updates, opt_state = _OPT.update(grads, opt_state)
    return eqx.apply_updates(model, updates), opt_state, value


# the step as users jit it here; compiled for a target (no call), a jax.jit of it
# (the module's leaves are all arrays)
_FILTER_JIT_STEP = eqx.filter_jit(_train_step)


TARGETS = [
    pytest.param(None, id="here"),
    pytest.param("gpu:h100", id="gpu", marks=pytest.mark.skipif(
        not gpu.available(),
        reason=f"XLA:GPU's compiler is not installed ({gpu.cuda_install_line()})")),
]


def _live(target, spread=False):
    model = _GRU(jax.random.key(0), spread)
    opt_state = _OPT.init(eqx.filter(model, eqx.is_array))
    x = np.random.default_rng(0).random((BATCH, SEQ, FEATURES), np.float32)
    y = np.zeros((BATCH, 1), np.float32)
    jitted = _FILTER_JIT_STEP if target is None else jax.jit(_train_step)
    fn = analyze(jitted, model, opt_state, x, y, advise=False, target=target)
    assert fn.live_at_peak is not None
    return fn.live_at_peak


def _where(text: str) -> str:
    """``test_roles_loops.py:N``, the line of ``_GRU.__call__`` holding ``text``."""
    import inspect
    source, first = inspect.getsourcelines(_GRU.__call__)
    line = first + next(i for i, line in enumerate(source) if text in line)
    return f"{__file__.rsplit('/', 1)[-1]}:{line}"


def _residuals(live) -> int:
    """Bytes of the activations at the user's scan line."""
    return sum(p.bytes for p in live.parts if p.role == "activations"
               and (p.where or "").endswith(_where(SCAN_LINE)))


@pytest.mark.parametrize("target", TARGETS)
def test_the_scans_residuals_are_activations_at_the_users_scan_line(target):
    """Wherever the peak falls (JAX 0.7's XLA:CPU: inside the forward loop, its
    residuals half filled and held by the body's parameter, which carries no op
    name; JAX 0.12: in the backward loop), the loop's state is the loop's
    value: activations, at the user's scan line."""
    live = _live(target)
    assert sum(r.bytes for r in live.roles) == live.bytes
    assert live.role_bytes("unknown") <= 0.05 * live.bytes
    stacked = SEQ * BATCH * HIDDEN * 4  # one f32[SEQ, BATCH, HIDDEN] per residual
    assert _residuals(live) >= 4 * stacked
    assert live.role_bytes("activations") >= 0.5 * live.bytes


def test_the_residuals_keep_their_role_where_the_peak_falls_in_the_forward_loop():
    """At a peak inside the forward loop the residuals are its state, being
    filled: the body's parameter (no op name) and the in-place updates read by
    nothing in the body but the next step. They are the loop's value that the
    backward loop reads: activations at the scan line, as at a peak in the
    backward loop (they read as other temporaries or cannot be told there, and
    flipped between runs whose peaks fell apart)."""
    live = _live(None, spread=True)
    assert sum(r.bytes for r in live.roles) == live.bytes
    # the peak is in the forward loop: the spread, which lives only there, is live
    assert any(p.role == "temporaries" and (p.where or "").endswith(_where(SPREAD_LINE))
               for p in live.parts)
    assert live.role_bytes("unknown") <= 0.05 * live.bytes
    stacked = SEQ * BATCH * HIDDEN * 4
    assert _residuals(live) >= 4 * stacked
