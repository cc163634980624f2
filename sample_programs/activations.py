"""An MLP whose activations are chains of elementwise functions, trained with SGD
and jitted without donation: what the backward pass keeps is most of its memory.

`jax.value_and_grad(loss_fn)` saves, per layer, the outputs of `sin`, `cos` and
`tanh` on the activation line (`batch x width` floats each). `memscope run
--remat` lists those residuals by source line, compiles the step under each
`jax.checkpoint` policy, and advises `jax.value_and_grad(jax.checkpoint(loss_fn,
policy=jax.checkpoint_policies.nothing_saveable))` together with
`donate_argnames=("params",)`, with the peak it measured for both applied.

Run it as `python sample_programs/activations.py --steps 3`; `--layers`,
`--width` and `--batch` change its size.
"""

import argparse

import jax
import jax.numpy as jnp


def init_params(key, layers, width):
    keys = jax.random.split(key, layers)
    return [jax.random.normal(k, (width, width)) / width ** 0.5 for k in keys]


def loss_fn(params, x):
    h = x
    for w in params:
        h = h @ w
        h = jnp.sin(jnp.cos(jnp.sin(h)) * jnp.tanh(h))
    return (h ** 2).mean()


@jax.jit
def train_step(params, x):
    loss, grads = jax.value_and_grad(loss_fn)(params, x)
    return [p - 0.1 * g for p, g in zip(params, grads, strict=True)], loss


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--width", type=int, default=128)
    parser.add_argument("--batch", type=int, default=8192)
    args = parser.parse_args()
    params = init_params(jax.random.key(0), args.layers, args.width)
    x = jax.random.normal(jax.random.key(1), (args.batch, args.width))
    for _ in range(args.steps):
        params, loss = train_step(params, x)
    print(f"final loss {float(loss):.6f}")
    return params


if __name__ == "__main__":
    params = main()  # the trained state lives on to the end, as a global
