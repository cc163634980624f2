"""A tiny MLP (64-128-64) trained with optax's adam, not donated, for the roles'
tests (tests/test_roles_targets.py): ``train_step`` gives back its parameters
and optimizer state, ``grads_step`` returns gradients of the parameters'
structure, and ``closed_step`` closes over a dataset array (2 MiB) it slices a
batch from."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import optax

WIDTHS = (64, 128, 64)
BATCH = 32
#: closed_step's batch: its temporaries outgrow the dataset it closes over
CLOSED_BATCH = 2048


def init(key: jax.Array) -> dict:
    k1, k2 = jax.random.split(key)
    return {"l1": {"w": jax.random.normal(k1, WIDTHS[:2]) * 0.1, "b": jnp.zeros(WIDTHS[1])},
            "l2": {"w": jax.random.normal(k2, WIDTHS[1:]) * 0.1, "b": jnp.zeros(WIDTHS[2])}}


def loss_fn(params: dict, x: jax.Array, y: jax.Array) -> jax.Array:
    h = jnp.tanh(x @ params["l1"]["w"] + params["l1"]["b"])
    return jnp.mean((h @ params["l2"]["w"] + params["l2"]["b"] - y) ** 2)


opt = optax.adam(1e-3)
data_x = jnp.asarray(np.random.RandomState(0).randn(2 * CLOSED_BATCH, WIDTHS[0]),
                     dtype=jnp.float32)
data_y = jnp.asarray(np.random.RandomState(1).randn(2 * CLOSED_BATCH, WIDTHS[2]),
                     dtype=jnp.float32)


def train(params, opt_state, x, y):
    loss, grads = jax.value_and_grad(loss_fn)(params, x, y)
    updates, opt_state = opt.update(grads, opt_state, params)
    return optax.apply_updates(params, updates), opt_state, loss


def grads(params, x, y):
    return jax.grad(loss_fn)(params, x, y)


def closed(params, opt_state, i):
    x = jax.lax.dynamic_slice_in_dim(data_x, i * CLOSED_BATCH, CLOSED_BATCH)
    y = jax.lax.dynamic_slice_in_dim(data_y, i * CLOSED_BATCH, CLOSED_BATCH)
    return train(params, opt_state, x, y)


train_step = jax.jit(train)
grads_step = jax.jit(grads)
closed_step = jax.jit(closed)


def main() -> None:
    params = init(jax.random.key(0))
    opt_state = opt.init(params)
    x, y = jnp.ones((BATCH, WIDTHS[0])), jnp.ones((BATCH, WIDTHS[2]))
    grads_step(params, x, y)
    params, opt_state, _ = train_step(params, opt_state, x, y)
    params, opt_state, _ = closed_step(params, opt_state, 0)
    jax.block_until_ready(params)


if __name__ == "__main__":
    main()
