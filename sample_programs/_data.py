"""Shared toy data and model for the sample programs: a two-layer MLP regressor."""

from itertools import pairwise

import jax
import jax.numpy as jnp


def init_params(key, sizes=(32, 64, 1)):
    params = []
    for fan_in, fan_out in pairwise(sizes):
        key, sub = jax.random.split(key)
        params.append({"w": jax.random.normal(sub, (fan_in, fan_out)) / jnp.sqrt(fan_in),
                       "b": jnp.zeros((fan_out,))})
    return params


def batch(key, size=128, features=32):
    kx, kn = jax.random.split(key)
    x = jax.random.normal(kx, (size, features))
    y = jnp.sin(x.sum(axis=1, keepdims=True)) + 0.01 * jax.random.normal(kn, (size, 1))
    return x, y


def loss_fn(params, x, y):
    h = x
    for layer in params[:-1]:
        h = jax.nn.relu(h @ layer["w"] + layer["b"])
    pred = h @ params[-1]["w"] + params[-1]["b"]
    return jnp.mean((pred - y) ** 2)
