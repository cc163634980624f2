"""A frozen input returned unchanged gets copied.

Fine-tuning with a frozen embedding table: the step returns `frozen` as it came
in so the caller can keep threading it through. It is not donated, so the
compiled program copies it into a new output buffer every step
(`copy_of_input`): a whole extra table of memory and a memcpy per step.
"""

import argparse

import jax
import jax.numpy as jnp
from _data import batch, init_params, loss_fn


@jax.jit
def train_step(params, frozen, x, y):
    def full_loss(p):
        return loss_fn(p, x @ frozen, y)

    loss, grads = jax.value_and_grad(full_loss)(params)
    params = jax.tree.map(lambda p, g: p - 0.01 * g, params, grads)
    return params, frozen, loss


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=20)
    args = parser.parse_args()
    params = init_params(jax.random.key(0))
    frozen = jnp.eye(32) + 0.01 * jax.random.normal(jax.random.key(2), (32, 32))
    x, y = batch(jax.random.key(1))
    for _ in range(args.steps):
        params, frozen, loss = train_step(params, frozen, x, y)
    print(f"final loss {float(loss):.6f}")
    return params


if __name__ == "__main__":
    params = main()  # the trained state lives on to the end, as a global
