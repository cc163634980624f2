"""A Flax NNX classifier trained with ``nnx.Optimizer`` through ``nnx.jit``, fed
NumPy batches (as a data loader yields them): written the way Flax's own MNIST
tutorial writes its step. ``make(n)`` gives the step and its arguments at batch
``n`` (for the tests' own compiles)."""

import sys

import numpy as np
import optax
from flax import nnx


class MLP(nnx.Module):
    def __init__(self, din, dhidden, dout, *, rngs):
        self.linear1 = nnx.Linear(din, dhidden, rngs=rngs)
        self.linear2 = nnx.Linear(dhidden, dhidden, rngs=rngs)
        self.linear3 = nnx.Linear(dhidden, dout, rngs=rngs)

    def __call__(self, x):
        x = nnx.relu(self.linear1(x))
        x = nnx.relu(self.linear2(x))
        return self.linear3(x)


def loss_fn(model, batch):
    logits = model(batch["image"])
    return optax.softmax_cross_entropy_with_integer_labels(logits, batch["label"]).mean()


@nnx.jit
def train_step(model, optimizer, batch):
    loss, grads = nnx.value_and_grad(loss_fn)(model, batch)
    optimizer.update(model, grads)
    return loss


def batch_of(n, seed=0):
    rng = np.random.default_rng(seed)
    return {"image": rng.normal(size=(n, 64)).astype(np.float32),
            "label": rng.integers(0, 10, size=(n,)).astype(np.int32)}


def make(n, hidden=256):
    model = MLP(64, hidden, 10, rngs=nnx.Rngs(0))
    optimizer = nnx.Optimizer(model, optax.adamw(1e-3), wrt=nnx.Param)
    return train_step, (model, optimizer, batch_of(n))


if __name__ == "__main__":  # python nnx_step.py [BATCH [HIDDEN]]
    n, hidden = (int(a) for a in (sys.argv[1:] + ["128", "256"][len(sys.argv) - 1:])[:2])
    step, (model, optimizer, _) = make(n, hidden)
    for i in range(4):
        loss = step(model, optimizer, batch_of(n, seed=i))
    print("loss", float(loss))
