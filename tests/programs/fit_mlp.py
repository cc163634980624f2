"""A small MLP training loop for ``memscope fit``: ``train_step(params, x, y)``.

``--batch`` sets the batch size; ``--donate`` donates the parameters.
"""

import sys

import jax
import jax.numpy as jnp

WIDTH = 256


def init(key):
    k1, k2 = jax.random.split(key)
    return {"w1": jax.random.normal(k1, (64, WIDTH)) / 8, "b1": jnp.zeros(WIDTH),
            "w2": jax.random.normal(k2, (WIDTH, 10)) / 16, "b2": jnp.zeros(10)}


def loss(params, x, y):
    h = jax.nn.relu(x @ params["w1"] + params["b1"])
    logits = h @ params["w2"] + params["b2"]
    return -(jax.nn.log_softmax(logits) * y).sum(-1).mean()


def step(params, x, y):
    grads = jax.grad(loss)(params, x, y)
    return jax.tree.map(lambda p, g: p - 0.1 * g, params, grads)


train_step = jax.jit(step)


def main(batch):
    params = init(jax.random.key(0))
    for i in range(3):
        x = jax.random.normal(jax.random.key(i), (batch, 64))
        y = jax.nn.one_hot(jnp.arange(batch) % 10, 10)
        params = train_step(params, x, y)
    print("done", float(params["b2"].sum()) == float(params["b2"].sum()))


if __name__ == "__main__":
    main(int(sys.argv[sys.argv.index("--batch") + 1]) if "--batch" in sys.argv else 32)
