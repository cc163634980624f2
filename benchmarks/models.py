"""The models the benchmarks measure: sample_programs/transformer_adam.py, and a
plain transformer step.

They differ on purpose. ``transformer_adam`` is the real-sized program users
see (optax's Adam, embeddings, 405 input leaves at the ``real`` size): the
benchmarks of what a run costs (bench_real, bench_live, bench_roles,
bench_remat, bench_plan) run it. The plain transformer (``plain_*``: float
activations in, a momentum update written out, six arrays a layer, no
framework) is what the benchmarks of memscope's own analysis and variant
compiles (bench_analysis, bench_variants) time beside XLA's compile of it,
where the compile's size (its HLO instructions, one set a layer, unrolled)
matters and a library's code would only add noise.
"""

from __future__ import annotations

import functools
import importlib.util
from pathlib import Path
from types import ModuleType

import jax
import jax.numpy as jnp

from benchmarks.sizes import Size

ROOT = Path(__file__).resolve().parent.parent
SAMPLES = ROOT / "sample_programs"
TRANSFORMER_ADAM = SAMPLES / "transformer_adam.py"


def load_program(path: Path) -> ModuleType:
    """The program at ``path`` imported as a module (its ``main`` does not run)."""
    spec = importlib.util.spec_from_file_location(path.stem, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@functools.cache
def transformer_adam() -> ModuleType:
    """sample_programs/transformer_adam.py, loaded once: ``init_params``,
    ``optimizer``, ``make_batch``, ``train_step`` (jitted)."""
    return load_program(TRANSFORMER_ADAM)


def plain_params(key, layers: int, width: int, heads: int = 4):
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


def plain_loss(params, x, heads: int = 4):
    for p in params:  # unrolled: one set of instructions per layer
        x = _block(p, x, heads)
    return jnp.mean(x ** 2)


def plain_train_step(params, opt_state, x):
    """One step: the loss, its gradients, momentum and the update (nothing jitted)."""
    value, grads = jax.value_and_grad(plain_loss)(params, x)
    opt_state = jax.tree.map(lambda m, g: 0.9 * m + g, opt_state, grads)
    params = jax.tree.map(lambda p, m: p - 1e-3 * m, params, opt_state)
    return params, opt_state, value


def plain_step_args(size: Size):
    """``plain_train_step``'s parameters, momentum and input, of ``size``."""
    params = plain_params(jax.random.key(0), size.layers, size.width)
    opt_state = jax.tree.map(jnp.zeros_like, params)
    x = jax.random.normal(jax.random.key(1), (size.batch, size.seq, size.width))
    return params, opt_state, x
