"""A small MLP classifier with optax Adam: a jitted init, train step and eval,
a few steps on random data. Compile-bound, as a CI smoke run or a notebook cell."""

import jax
import jax.numpy as jnp
import optax

SIZES = (784, 512, 256, 10)


def init(key):
    keys = jax.random.split(key, len(SIZES) - 1)
    return [{"w": jax.random.normal(k, (a, b)) * a ** -0.5, "b": jnp.zeros(b)}
            for k, a, b in zip(keys, SIZES[:-1], SIZES[1:], strict=True)]


def forward(params, x):
    for layer in params[:-1]:
        x = jax.nn.relu(x @ layer["w"] + layer["b"])
    return x @ params[-1]["w"] + params[-1]["b"]


def loss_fn(params, x, y):
    return optax.softmax_cross_entropy_with_integer_labels(forward(params, x), y).mean()


optimizer = optax.adam(1e-3)


@jax.jit
def train_step(params, opt_state, x, y):
    loss, grads = jax.value_and_grad(loss_fn)(params, x, y)
    updates, opt_state = optimizer.update(grads, opt_state, params)
    return optax.apply_updates(params, updates), opt_state, loss


@jax.jit
def accuracy(params, x, y):
    return (forward(params, x).argmax(-1) == y).mean()


params = jax.jit(init)(jax.random.key(0))
opt_state = jax.jit(optimizer.init)(params)
x = jax.random.normal(jax.random.key(1), (128, 784))
y = jax.random.randint(jax.random.key(2), (128,), 0, 10)
for _ in range(10):
    params, opt_state, loss = train_step(params, opt_state, x, y)
print(f"loss {float(loss):.3f}, accuracy {float(accuracy(params, x, y)):.2f}")
