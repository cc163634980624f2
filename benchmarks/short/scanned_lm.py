"""A small scanned language model: token embedding, layers stacked and run by
``lax.scan``, optax Adam, two steps. The step a TPU or GPU user would ask
``--target`` about; compile-bound on a CPU.

    python benchmarks/short/scanned_lm.py [--layers 4] [--width 256] [--steps 2]

``step`` and ``example_arguments`` are what benchmarks/bench_target.py compiles
directly, with JAX's own deviceless compile, beside ``memscope run --target``.
"""

from __future__ import annotations

import argparse
import sys

import jax
import jax.numpy as jnp
import numpy as np
import optax

VOCAB, TOKENS, BATCH, HEADS = 2048, 128, 8, 4


def init(key, layers: int, width: int):
    k_embed, k_layers = jax.random.split(key)

    def layer(k):
        a, b, c, d = jax.random.split(k, 4)
        return {"qkv": jax.random.normal(a, (width, 3 * width)) / width ** 0.5,
                "out": jax.random.normal(b, (width, width)) / width ** 0.5,
                "up": jax.random.normal(c, (width, 4 * width)) / width ** 0.5,
                "down": jax.random.normal(d, (4 * width, width)) / (4 * width) ** 0.5,
                "ln1": jnp.ones(width), "ln2": jnp.ones(width)}

    return {"embed": jax.random.normal(k_embed, (VOCAB, width)) * 0.02,
            "layers": jax.vmap(layer)(jax.random.split(k_layers, layers))}


def _norm(x, scale):
    return scale * (x - x.mean(-1, keepdims=True)) / jnp.sqrt(x.var(-1, keepdims=True) + 1e-5)


def _block(x, p):
    b, t, d = x.shape
    q, k, v = jnp.split(_norm(x, p["ln1"]) @ p["qkv"], 3, axis=-1)
    q, k, v = (a.reshape(b, t, HEADS, d // HEADS) for a in (q, k, v))
    mask = jnp.tril(jnp.ones((t, t), bool))
    scores = jnp.einsum("bqhd,bkhd->bhqk", q, k) / (d // HEADS) ** 0.5
    att = jax.nn.softmax(jnp.where(mask, scores, -1e9), axis=-1)
    x = x + jnp.einsum("bhqk,bkhd->bqhd", att, v).reshape(b, t, d) @ p["out"]
    return x + jax.nn.gelu(_norm(x, p["ln2"]) @ p["up"]) @ p["down"], None


def loss(params, tokens):
    x = params["embed"][tokens[:, :-1]]
    x, _ = jax.lax.scan(_block, x, params["layers"])
    logits = x @ params["embed"].T
    return optax.softmax_cross_entropy_with_integer_labels(logits, tokens[:, 1:]).mean()


optimizer = optax.adam(3e-4)


@jax.jit
def step(params, opt_state, tokens):
    value, grads = jax.value_and_grad(loss)(params, tokens)
    updates, opt_state = optimizer.update(grads, opt_state, params)
    return optax.apply_updates(params, updates), opt_state, value


def example_arguments(layers: int = 4, width: int = 256):
    """The step's arguments, as the program first calls it."""
    params = init(jax.random.key(0), layers, width)
    tokens = np.random.default_rng(0).integers(0, VOCAB, (BATCH, TOKENS + 1), dtype=np.int32)
    return params, optimizer.init(params), tokens


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--width", type=int, default=256)
    parser.add_argument("--steps", type=int, default=2)
    args = parser.parse_args(argv)
    params, opt_state, tokens = example_arguments(args.layers, args.width)
    for _ in range(args.steps):
        params, opt_state, value = step(params, opt_state, tokens)
    print(f"loss {float(value):.4f}")


if __name__ == "__main__":
    main(sys.argv[1:])
