"""A Haiku MLP (``hk.transform``) trained with optax under ``jax.jit``, as
Haiku's own examples write it, fed NumPy batches."""

import haiku as hk
import jax
import jax.numpy as jnp
import numpy as np
import optax


def forward(x):
    return hk.nets.MLP([256, 256, 10])(x)


net = hk.without_apply_rng(hk.transform(forward))
optimizer = optax.adam(1e-3)


def loss(params, images, labels):
    logits = net.apply(params, images)
    return optax.softmax_cross_entropy(logits, jax.nn.one_hot(labels, 10)).mean()


@jax.jit
def update(params, opt_state, images, labels):
    grads = jax.grad(loss)(params, images, labels)
    updates, opt_state = optimizer.update(grads, opt_state)
    return optax.apply_updates(params, updates), opt_state


def batch_of(n, seed=0):
    rng = np.random.default_rng(seed)
    return rng.normal(size=(n, 64)).astype(np.float32), rng.integers(0, 10, n).astype(np.int32)


def make(n):
    params = net.init(jax.random.PRNGKey(42), jnp.ones((1, 64)))
    return update, (params, optimizer.init(params), *batch_of(n))


if __name__ == "__main__":
    step, (params, opt_state, _, _) = make(128)
    for i in range(4):
        params, opt_state = step(params, opt_state, *batch_of(128, seed=i))
    print("done")
