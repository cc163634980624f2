"""The same loop as donated.py, with its state in `jax.Ref`s (JAX 0.7.2 and later).

The parameters and the momentum are Refs (`jax.new_ref`), passed to the step and
updated in place: JAX writes each new value into the Ref's own buffer, so there
is nothing to donate and nothing to return. Every state leaf reads `ref_updated`,
`same_buffer, kept`; a step counter the step closes over (`steps`) is a
closed-over Ref, `ref_updated` too. The batch is read, `not_donated`.
"""

import argparse

import jax
import jax.numpy as jnp
from _data import batch, init_params, loss_fn

steps = jax.new_ref(jnp.zeros((), jnp.int32))


@jax.jit
def train_step(params, momentum, x, y):
    values = jax.tree.map(lambda r: r[...], params)
    loss, grads = jax.value_and_grad(loss_fn)(values, x, y)
    for p, m, g in zip(jax.tree.leaves(params), jax.tree.leaves(momentum),
                       jax.tree.leaves(grads), strict=True):
        m[...] = 0.9 * m[...] + g
        p[...] = p[...] - 0.01 * m[...]
    steps[...] += 1
    return loss


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=20)
    args = parser.parse_args()
    params = jax.tree.map(jax.new_ref, init_params(jax.random.key(0)))
    momentum = jax.tree.map(lambda r: jax.new_ref(jnp.zeros(r.shape, r.dtype)), params)
    x, y = batch(jax.random.key(1))
    for _ in range(args.steps):
        loss = train_step(params, momentum, x, y)
    print(f"final loss {float(loss):.6f} after {int(steps[...])} steps")
    return params, momentum


if __name__ == "__main__":
    state = main()  # the trained state lives on to the end, as a global
