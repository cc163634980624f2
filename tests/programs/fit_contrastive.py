"""A contrastive step whose peak is not linear in the batch: the loss compares
every example with every other (a batch x batch similarity matrix), so the
peak grows with the batch's square. ``train_step(params, x)``."""

import jax
import jax.numpy as jnp


def init(key):
    return {"w": jax.random.normal(key, (16, 8)) / 4}


def loss(params, x):
    z = jnp.tanh(x @ params["w"])
    similarity = z @ z.T
    return -jnp.mean(jnp.diag(jax.nn.log_softmax(similarity, axis=-1)))


def step(params, x):
    return jax.tree.map(lambda p, g: p - 0.1 * g, params, jax.grad(loss)(params, x))


train_step = jax.jit(step)


if __name__ == "__main__":
    params = init(jax.random.key(0))
    for i in range(3):
        params = train_step(params, jax.random.normal(jax.random.key(i), (16, 16)))
