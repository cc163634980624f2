"""A Flax linen CNN-free classifier with a ``TrainState`` stepped under
``jax.jit``, as Flax's linen examples write it, fed NumPy batches."""

import flax.linen as nn
import jax
import numpy as np
import optax
from flax.training import train_state


class MLP(nn.Module):
    @nn.compact
    def __call__(self, x):
        x = nn.relu(nn.Dense(256)(x))
        x = nn.relu(nn.Dense(256)(x))
        return nn.Dense(10)(x)


@jax.jit
def train_step(state, images, labels):
    def loss_fn(params):
        logits = state.apply_fn({"params": params}, images)
        return optax.softmax_cross_entropy_with_integer_labels(logits, labels).mean()

    loss, grads = jax.value_and_grad(loss_fn)(state.params)
    return state.apply_gradients(grads=grads), loss


def batch_of(n, seed=0):
    rng = np.random.default_rng(seed)
    return rng.normal(size=(n, 64)).astype(np.float32), rng.integers(0, 10, n).astype(np.int32)


def make(n):
    model = MLP()
    params = model.init(jax.random.PRNGKey(0), np.ones((1, 64), np.float32))["params"]
    state = train_state.TrainState.create(apply_fn=model.apply, params=params,
                                          tx=optax.sgd(0.1, momentum=0.9))
    return train_step, (state, *batch_of(n))


if __name__ == "__main__":
    step, (state, _, _) = make(128)
    for i in range(4):
        state, loss = step(state, *batch_of(128, seed=i))
    print("loss", float(loss))
