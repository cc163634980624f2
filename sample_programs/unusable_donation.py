"""Donations that cannot all be used.

The step donates everything (`donate_argnums=(0, 1, 2)`):
- `params` (float32) come back as float32 of the same shapes: `aliased`;
- `x`, the float32 batch, has no float32 output of its shape, but the step
  returns bfloat16 activations with the same element count, so JAX offers it
  to XLA as an optional `donor`;
- `y`, the targets, has no output with its element count at all: `unusable`,
  the leaf JAX's "Some donated buffers were not usable: float32[128,1]" means.
"""

import argparse

import jax
import jax.numpy as jnp
from _data import batch, init_params, loss_fn


def step(params, x, y):
    loss, grads = jax.value_and_grad(loss_fn)(params, x, y)
    params = jax.tree.map(lambda p, g: p - 0.01 * g, params, grads)
    features = jnp.tanh(x).astype(jnp.bfloat16)  # same element count as x, new dtype
    return params, features, loss


train_step = jax.jit(step, donate_argnums=(0, 1, 2))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=20)
    args = parser.parse_args()
    params = init_params(jax.random.key(0))
    for i in range(args.steps):
        x, y = batch(jax.random.key(i))
        params, features, loss = train_step(params, x, y)
    print(f"final loss {float(loss):.6f}, features {features.dtype}")
    return params


if __name__ == "__main__":
    params = main()  # the trained state lives on to the end, as a global
