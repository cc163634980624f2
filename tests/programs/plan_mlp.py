"""A training step for ``memscope fit --plan``: an MLP whose activations are
chains of elementwise functions (what the backward pass keeps is most of its
memory), the dot outputs named ``hidden`` with ``checkpoint_name``, trained
with SGD and jitted without donation. ``train_step(params, x)``; ``--batch``
sets the batch size.
"""

import sys

import jax
import jax.numpy as jnp
from jax.ad_checkpoint import checkpoint_name

WIDTH, LAYERS = 128, 4


def init(key):
    keys = jax.random.split(key, LAYERS)
    return [jax.random.normal(k, (WIDTH, WIDTH)) / WIDTH ** 0.5 for k in keys]


def loss_fn(params, x):
    h = x
    for w in params:
        h = checkpoint_name(h @ w, "hidden")
        h = jnp.sin(jnp.cos(jnp.sin(h)) * jnp.tanh(h))
    return (h ** 2).mean()


def step(params, x):
    loss, grads = jax.value_and_grad(loss_fn)(params, x)
    return [p - 0.1 * g for p, g in zip(params, grads, strict=True)], loss


train_step = jax.jit(step)


def main(batch):
    params = init(jax.random.key(0))
    for i in range(3):
        x = jax.random.normal(jax.random.key(i), (batch, WIDTH))
        params, loss = train_step(params, x)
    print("loss", float(loss))


if __name__ == "__main__":
    main(int(sys.argv[sys.argv.index("--batch") + 1]) if "--batch" in sys.argv else 256)
