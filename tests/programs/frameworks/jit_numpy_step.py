"""A plain ``jax.jit`` MLP step, the layout of JAX's own MNIST example (a list
of ``(w, b)`` pairs, SGD written out), fed NumPy batches."""

import jax
import jax.numpy as jnp
import numpy as np


def init(key, sizes):
    keys = jax.random.split(key, len(sizes) - 1)
    return [(jax.random.normal(k, (a, b)) / np.sqrt(a), jnp.zeros(b))
            for k, a, b in zip(keys, sizes[:-1], sizes[1:], strict=True)]


def predict(params, x):
    for w, b in params[:-1]:
        x = jnp.tanh(x @ w + b)
    w, b = params[-1]
    return x @ w + b


def loss(params, x, y):
    return -jnp.mean(jnp.sum(jax.nn.log_softmax(predict(params, x)) * y, axis=1))


@jax.jit
def update(params, x, y):
    grads = jax.grad(loss)(params, x, y)
    return [(w - 0.01 * dw, b - 0.01 * db) for (w, b), (dw, db) in zip(params, grads, strict=True)]


def batch_of(n, seed=0):
    rng = np.random.RandomState(seed)
    return (rng.randn(n, 784).astype(np.float32),
            np.eye(10, dtype=np.float32)[rng.randint(0, 10, n)])


def make(n):
    return update, (init(jax.random.PRNGKey(0), [784, 512, 512, 10]), *batch_of(n))


if __name__ == "__main__":
    step, (params, _, _) = make(100)
    for i in range(3):
        params = step(params, *batch_of(100, seed=i))
    print("done", float(params[0][0].sum()))
