"""A classifier trained the way JAX's own MNIST example trains one: an MLP
(784-1024-1024-10) from ``jax.example_libraries.stax``, momentum SGD from its
``optimizers``, one jitted ``update(i, opt_state, batch)`` called with a Python
step number and a NumPy batch, thousands of small calls, accuracy on the
whole set after each epoch. The data are MNIST's shapes with random values
(this benchmark reaches no network).

    python benchmarks/mnist_like.py [--epochs 2]

bench_overhead.py runs it plainly and under ``memscope run``.
"""

from __future__ import annotations

import argparse
import itertools
import time

import jax.numpy as jnp
import numpy as np
from jax import grad as jax_grad
from jax import jit, random
from jax.example_libraries import optimizers, stax


def data(rng: np.random.RandomState) -> tuple[np.ndarray, ...]:
    def labels(n: int) -> np.ndarray:
        return np.eye(10, dtype=np.float32)[rng.randint(0, 10, n)]
    return (rng.rand(60_000, 784).astype(np.float32), labels(60_000),
            rng.rand(10_000, 784).astype(np.float32), labels(10_000))


init_params, predict = stax.serial(stax.Dense(1024), stax.Relu, stax.Dense(1024), stax.Relu,
                                   stax.Dense(10), stax.LogSoftmax)


def loss(params, batch):
    inputs, targets = batch
    return -jnp.mean(jnp.sum(predict(params, inputs) * targets, axis=1))


def accuracy(params, batch):
    inputs, targets = batch
    return jnp.mean(jnp.argmax(predict(params, inputs), axis=1) == jnp.argmax(targets, axis=1))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--batch", type=int, default=128)
    args = parser.parse_args()
    train_x, train_y, test_x, test_y = data(np.random.RandomState(0))
    batches_per_epoch = -(-len(train_x) // args.batch)

    def stream():
        rng = np.random.RandomState(0)
        while True:
            order = rng.permutation(len(train_x))
            for i in range(batches_per_epoch):
                chosen = order[i * args.batch:(i + 1) * args.batch]
                yield train_x[chosen], train_y[chosen]

    opt_init, opt_update, get_params = optimizers.momentum(0.001, mass=0.9)

    @jit
    def update(i, opt_state, batch):
        return opt_update(i, jax_grad(loss)(get_params(opt_state), batch), opt_state)

    _, params = init_params(random.key(0), (-1, 784))
    opt_state = opt_init(params)
    steps, batches = itertools.count(), stream()
    for epoch in range(args.epochs):
        start = time.time()
        for _ in range(batches_per_epoch):
            opt_state = update(next(steps), opt_state, next(batches))
        params = get_params(opt_state)
        print(f"epoch {epoch} in {time.time() - start:.2f} s, train accuracy "
              f"{float(accuracy(params, (train_x, train_y))):.3f}, test accuracy "
              f"{float(accuracy(params, (test_x, test_y))):.3f}")


if __name__ == "__main__":
    main()
