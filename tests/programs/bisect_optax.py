"""An MLP trained with optax's adam, its parameters and optimizer state
donated: memscope bisect --package optax's test."""

import functools

import jax
import jax.numpy as jnp
import optax

opt = optax.adam(1e-3)


def init(key, sizes=(64, 256, 256, 10)):
    keys = jax.random.split(key, len(sizes) - 1)
    return [(jax.random.normal(k, (a, b)) * 0.05, jnp.zeros(b))
            for k, a, b in zip(keys, sizes[:-1], sizes[1:], strict=True)]


def loss(params, x, y):
    for w, b in params[:-1]:
        x = jax.nn.relu(x @ w + b)
    w, b = params[-1]
    return optax.softmax_cross_entropy_with_integer_labels(x @ w + b, y).mean()


@functools.partial(jax.jit, donate_argnums=(0, 1))
def train_step(params, state, x, y):
    value, grads = jax.value_and_grad(loss)(params, x, y)
    updates, state = opt.update(grads, state, params)
    return optax.apply_updates(params, updates), state, value


def main():
    params = init(jax.random.key(0))
    state = opt.init(params)
    x = jax.random.normal(jax.random.key(1), (128, 64))
    y = jnp.arange(128) % 10
    for _ in range(3):
        params, state, value = train_step(params, state, x, y)
    print(f"loss {float(value):.4f}")


if __name__ == "__main__":
    main()
