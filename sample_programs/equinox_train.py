"""An Equinox MLP trained with optax's Adam through `eqx.filter_jit(donate="all")`.

memscope reports the step under its own name and line, every leaf by the
user's path (`model.layers[0].weight`, `opt_state[0].mu.layers[0].weight`, `x`),
and donation in Equinox's terms (`eqx.filter_jit(donate="all")`):
- the model and the optimizer state come back updated: `aliased`;
- the batch `x`, `y` has no output to take its buffers: `unusable`. JAX warns
  "Some donated buffers were not usable", but `donate="all"` silences that
  warning, so this program never shows it; memscope still reports both leaves.
  Passing the batch first with `donate="all-except-first"` donates only the state.
"""

import argparse

import equinox as eqx
import jax
import jax.numpy as jnp
import optax
from _data import batch

optimizer = optax.adam(1e-2)


@eqx.filter_jit(donate="all")
def train_step(model, opt_state, x, y):
    def loss_fn(model):
        return jnp.mean((jax.vmap(model)(x) - y) ** 2)

    loss, grads = eqx.filter_value_and_grad(loss_fn)(model)
    updates, opt_state = optimizer.update(grads, opt_state, eqx.filter(model, eqx.is_array))
    model = eqx.apply_updates(model, updates)
    return model, opt_state, loss


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=20)
    args = parser.parse_args()
    model = eqx.nn.MLP(32, 1, width_size=64, depth=1, key=jax.random.key(0))
    opt_state = optimizer.init(eqx.filter(model, eqx.is_array))
    for i in range(args.steps):
        x, y = batch(jax.random.key(i))
        model, opt_state, loss = train_step(model, opt_state, x, y)
    print(f"final loss {float(loss):.6f}")
    return model


if __name__ == "__main__":
    model = main()  # the trained state lives on to the end, as a global
