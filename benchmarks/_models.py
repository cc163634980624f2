"""Programs the benchmarks measure: a transformer training step of any depth."""

from __future__ import annotations

import jax
import jax.numpy as jnp


def transformer_params(key, layers: int, width: int, heads: int = 4):
    params = []
    for _ in range(layers):
        key, *subs = jax.random.split(key, 5)
        params.append({
            "qkv": jax.random.normal(subs[0], (width, 3 * width)) / width ** 0.5,
            "out": jax.random.normal(subs[1], (width, width)) / width ** 0.5,
            "up": jax.random.normal(subs[2], (width, 4 * width)) / width ** 0.5,
            "down": jax.random.normal(subs[3], (4 * width, width)) / (4 * width) ** 0.5,
            "ln1": jnp.ones(width), "ln2": jnp.ones(width),
        })
    return params


def _norm(x, scale):
    return scale * (x - x.mean(-1, keepdims=True)) / jnp.sqrt(x.var(-1, keepdims=True) + 1e-5)


def _block(p, x, heads):
    b, t, d = x.shape
    q, k, v = jnp.split(_norm(x, p["ln1"]) @ p["qkv"], 3, axis=-1)
    q, k, v = (a.reshape(b, t, heads, d // heads) for a in (q, k, v))
    att = jax.nn.softmax(jnp.einsum("bqhd,bkhd->bhqk", q, k) / (d // heads) ** 0.5, axis=-1)
    x = x + jnp.einsum("bhqk,bkhd->bqhd", att, v).reshape(b, t, d) @ p["out"]
    return x + jax.nn.gelu(_norm(x, p["ln2"]) @ p["up"]) @ p["down"]


def loss(params, x, heads: int = 4):
    for p in params:  # unrolled: one set of instructions per layer
        x = _block(p, x, heads)
    return jnp.mean(x ** 2)


def train_step(params, opt_state, x):
    value, grads = jax.value_and_grad(loss)(params, x)
    opt_state = jax.tree.map(lambda m, g: 0.9 * m + g, opt_state, grads)
    params = jax.tree.map(lambda p, m: p - 1e-3 * m, params, opt_state)
    return params, opt_state, value


def transformer_step_args(layers: int, width: int, batch: int = 4, tokens: int = 64):
    params = transformer_params(jax.random.key(0), layers, width)
    opt_state = jax.tree.map(jnp.zeros_like, params)
    x = jax.random.normal(jax.random.key(1), (batch, tokens, width))
    return params, opt_state, x
