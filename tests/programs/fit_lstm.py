"""A tiny LSTM scanned over time: ``train_step(params, x, y)`` with ``x`` of shape
(time, batch, features) and ``y`` (time, batch, classes), time-major as
``lax.scan`` reads them. Axis 0 is time; the examples are along axis 1."""

import jax
import jax.numpy as jnp

HIDDEN, FEATURES, CLASSES, TIME = 16, 8, 4, 12


def init(key):
    k1, k2 = jax.random.split(key)
    return {"w": jax.random.normal(k1, (FEATURES + HIDDEN, 4 * HIDDEN)) / 8,
            "out": jax.random.normal(k2, (HIDDEN, CLASSES)) / 4}


def cell(params, carry, x):
    h, c = carry
    i, f, g, o = jnp.split(jnp.concatenate([x, h], -1) @ params["w"], 4, -1)
    c = jax.nn.sigmoid(f) * c + jax.nn.sigmoid(i) * jnp.tanh(g)
    h = jax.nn.sigmoid(o) * jnp.tanh(c)
    return (h, c), h


def loss(params, x, y):
    zeros = jnp.zeros((x.shape[1], HIDDEN))
    _, hs = jax.lax.scan(lambda carry, xt: cell(params, carry, xt), (zeros, zeros), x)
    return -(jax.nn.log_softmax(hs @ params["out"]) * y).sum(-1).mean()


def step(params, x, y):
    return jax.tree.map(lambda p, g: p - 0.1 * g, params, jax.grad(loss)(params, x, y))


train_step = jax.jit(step)


if __name__ == "__main__":
    params = init(jax.random.key(0))
    for _ in range(3):
        params = train_step(params, jnp.ones((TIME, 8, FEATURES)),
                            jax.nn.one_hot(jnp.zeros((TIME, 8), jnp.int32), CLASSES))
