"""One function, two input shapes: a training step and a ragged last batch.

128 examples in batches of 48 leave a last batch of 32, so `train_step` is
compiled twice; memscope shows one entry per signature with its own call count
and memory figures.
"""

import argparse
from functools import partial

import jax
from _data import batch, init_params, loss_fn


@partial(jax.jit, donate_argnums=0)
def train_step(params, x, y):
    loss, grads = jax.value_and_grad(loss_fn)(params, x, y)
    return jax.tree.map(lambda p, g: p - 0.01 * g, params, grads), loss


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=5, help="epochs")
    args = parser.parse_args()
    params = init_params(jax.random.key(0))
    x, y = batch(jax.random.key(1), size=128)
    for _ in range(args.steps):
        for start in range(0, 128, 48):
            params, loss = train_step(params, x[start:start + 48], y[start:start + 48])
    print(f"final loss {float(loss):.6f}")
    return params


if __name__ == "__main__":
    params = main()  # the trained state lives on to the end, as a global
