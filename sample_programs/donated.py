"""The same loop as forgot_to_donate.py, donating its state.

`donate_argnames=("params", "momentum")` lets XLA write the new state into the
old state's buffers: every state leaf is `aliased` and every new state leaf
`reuses_input`, so the step needs no second copy of the state. The learning
rate is a static keyword argument.
"""

import argparse
from functools import partial

import jax
import jax.numpy as jnp
from _data import batch, init_params, loss_fn


@partial(jax.jit, donate_argnames=("params", "momentum"), static_argnames=("lr",))
def train_step(params, momentum, x, y, *, lr):
    loss, grads = jax.value_and_grad(loss_fn)(params, x, y)
    momentum = jax.tree.map(lambda m, g: 0.9 * m + g, momentum, grads)
    params = jax.tree.map(lambda p, m: p - lr * m, params, momentum)
    return params, momentum, loss


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--lr", type=float, default=0.01)
    args = parser.parse_args()
    params = init_params(jax.random.key(0))
    momentum = jax.tree.map(jnp.zeros_like, params)
    x, y = batch(jax.random.key(1))
    for _ in range(args.steps):
        params, momentum, loss = train_step(params, momentum, x, y, lr=args.lr)
    print(f"final loss {float(loss):.6f}")
    return params


if __name__ == "__main__":
    params = main()  # the trained state lives on to the end, as a global
