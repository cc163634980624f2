"""A Flax NNX MLP trained with optax's Adam through
`nnx.jit(donate_argnames=("model", "optimizer"))`.

`nnx.jit` splits each module into its state before calling `jax.jit` and writes
the new state back after the call. memscope names every leaf by the module's
own fields (`model.layers[0].kernel`, `optimizer.opt_state[0].mu['layers'][0]['kernel']`),
and each new state leaf `... (written back)`. The model and the optimizer are
donated, so every state leaf is `aliased` and every new state leaf
`reuses_input`; the batch is not donated: `not_donated`.
"""

import argparse
from itertools import pairwise

import jax
import optax
from _data import batch
from flax import nnx


class MLP(nnx.Module):
    def __init__(self, sizes, rngs):
        self.layers = nnx.List([nnx.Linear(i, o, rngs=rngs) for i, o in pairwise(sizes)])

    def __call__(self, x):
        for layer in self.layers[:-1]:
            x = jax.nn.relu(layer(x))
        return self.layers[-1](x)


@nnx.jit(donate_argnames=("model", "optimizer"))
def train_step(model, optimizer, x, y):
    def loss_fn(model):
        return ((model(x) - y) ** 2).mean()

    loss, grads = nnx.value_and_grad(loss_fn)(model)
    optimizer.update(model, grads)
    return loss


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=20)
    args = parser.parse_args()
    model = MLP((32, 64, 1), nnx.Rngs(0))
    optimizer = nnx.Optimizer(model, optax.adam(1e-2), wrt=nnx.Param)
    for i in range(args.steps):
        x, y = batch(jax.random.key(i))
        loss = train_step(model, optimizer, x, y)
    print(f"final loss {float(loss):.6f}")
    return model


if __name__ == "__main__":
    model = main()  # the trained state lives on to the end, as a global
