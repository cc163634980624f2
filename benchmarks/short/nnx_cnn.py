"""A Flax NNX CNN trained with nnx.Optimizer under nnx.jit, as the Flax NNX
examples do: a few steps, then an evaluation. Compile-bound."""

import jax
import optax
from flax import nnx


class CNN(nnx.Module):
    def __init__(self, rngs: nnx.Rngs):
        self.conv1 = nnx.Conv(1, 16, kernel_size=(3, 3), rngs=rngs)
        self.conv2 = nnx.Conv(16, 32, kernel_size=(3, 3), rngs=rngs)
        self.dense = nnx.Linear(32 * 7 * 7, 128, rngs=rngs)
        self.out = nnx.Linear(128, 10, rngs=rngs)

    def __call__(self, x):
        pool = lambda y: nnx.avg_pool(y, window_shape=(2, 2), strides=(2, 2))  # noqa: E731
        x = pool(nnx.relu(self.conv1(x)))
        x = pool(nnx.relu(self.conv2(x)))
        return self.out(nnx.relu(self.dense(x.reshape(x.shape[0], -1))))


def loss_fn(model, x, y):
    return optax.softmax_cross_entropy_with_integer_labels(model(x), y).mean()


@nnx.jit
def train_step(model, optimizer, x, y):
    loss, grads = nnx.value_and_grad(loss_fn)(model, x, y)
    optimizer.update(model, grads) if _TAKES_MODEL else optimizer.update(grads)
    return loss


@nnx.jit
def evaluate(model, x, y):
    return (model(x).argmax(-1) == y).mean()


model = CNN(nnx.Rngs(0))
try:
    optimizer = nnx.Optimizer(model, optax.adam(1e-3), wrt=nnx.Param)
    _TAKES_MODEL = True
except TypeError:  # flax before 0.11: no wrt, update(grads)
    optimizer = nnx.Optimizer(model, optax.adam(1e-3))
    _TAKES_MODEL = False
x = jax.random.normal(jax.random.key(1), (64, 28, 28, 1))
y = jax.random.randint(jax.random.key(2), (64,), 0, 10)
for _ in range(5):
    loss = train_step(model, optimizer, x, y)
print(f"loss {float(loss):.3f}, accuracy {float(evaluate(model, x, y)):.2f}")
