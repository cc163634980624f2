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
from tests.versions import JAX_SERIES

HIDDEN, SEQ, BATCH, FEATURES = 32, 16, 8, 4
SCAN_LINE = "h, _ = jax.lax.scan(step, jnp.zeros(HIDDEN), xs)"


class _GRU(eqx.Module):
    cell: eqx.nn.GRUCell
    out: eqx.nn.Linear

    def __init__(self, key):
        k1, k2 = jax.random.split(key)
        self.cell = eqx.nn.GRUCell(FEATURES, HIDDEN, key=k1)
        self.out = eqx.nn.Linear(HIDDEN, 1, key=k2)

    def __call__(self, xs):
        def step(h, x):
            return self.cell(x, h), None

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


def _live(target):
    model = _GRU(jax.random.key(0))
    opt_state = _OPT.init(eqx.filter(model, eqx.is_array))
    x = np.random.default_rng(0).random((BATCH, SEQ, FEATURES), np.float32)
    y = np.zeros((BATCH, 1), np.float32)
    jitted = _FILTER_JIT_STEP if target is None else jax.jit(_train_step)
    fn = analyze(jitted, model, opt_state, x, y, advise=False, target=target)
    assert fn.live_at_peak is not None
    return fn.live_at_peak


def _scan_line() -> int:
    import inspect
    source, first = inspect.getsourcelines(_GRU.__call__)
    return first + next(i for i, line in enumerate(source) if SCAN_LINE in line)


@pytest.mark.parametrize("target", TARGETS)
def test_what_cannot_be_told_is_only_a_loop_body_s_own_parameter(target):
    """On every series: roles add up to the bytes live at the peak, and what
    cannot be told is at most 5% of them, or is the loop's state as XLA:CPU
    before JAX 0.12 defines it (at the loop body's parameter, which carries no
    op name): said so, never guessed."""
    live = _live(target)
    assert sum(r.bytes for r in live.roles) == live.bytes
    unknown = [b for b in live.buffers if b.role == "unknown"]
    loop_state = sum(b.bytes for b in unknown if b.opcode == "parameter" and b.op_name is None)
    assert live.role_bytes("unknown") - loop_state <= 0.05 * live.bytes


@pytest.mark.skipif(JAX_SERIES < (0, 12), reason="verified on JAX 0.12; JAX 0.7's XLA:CPU "
                    "defines the scan's stacked residuals at the loop body's parameter (no op "
                    "name), which the test above holds")
@pytest.mark.parametrize("target", TARGETS)
def test_the_scans_residuals_are_activations_at_the_users_scan_line(target):
    live = _live(target)
    assert live.role_bytes("unknown") <= 0.05 * live.bytes
    where = f"{__file__.rsplit('/', 1)[-1]}:{_scan_line()}"
    residuals = [p for p in live.parts if p.role == "activations"
                 and (p.where or "").endswith(where)]
    stacked = SEQ * BATCH * HIDDEN * 4  # one f32[SEQ, BATCH, HIDDEN] per residual
    assert residuals and sum(p.bytes for p in residuals) >= 4 * stacked
    assert live.role_bytes("activations") >= 0.5 * live.bytes
