"""What ``memscope fit`` costs on a framework's step beside the same step written
with ``jax.jit``: one MLP with Adam, fed NumPy batches, written three ways (plain
``jax.jit`` with optax, Flax NNX's ``nnx.jit`` with ``nnx.Optimizer``, Equinox's
``filter_jit``), each forecast for the same budget.

Runs, interleaved, in one invocation, each with memscope's cache empty (a first
run): ``memscope fit --format json`` on each program. Prints per program the
forecast's own seconds (the ``seconds`` of its JSON: the compiling search, after
the program stopped), its compiles, seconds per compile, the whole command's
wall time, and the forecast's ratio to the plain step's.

    python -m benchmarks.bench_fit_frameworks --size mlp --repeat 3

No figure here is asserted by the test suite.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
from pathlib import Path

from benchmarks._cache import timed_json
from benchmarks.sizes import add_size_options, parse_with_size

COMMON = """
import numpy as np
LAYERS, WIDTH, BATCH = {layers}, {width}, {batch}
def batch_of(seed):
    rng = np.random.default_rng(seed)
    return (rng.normal(size=(BATCH, WIDTH)).astype(np.float32),
            rng.integers(0, 10, BATCH).astype(np.int32))
"""

PROGRAMS = {
    "jax.jit": COMMON + """
import jax, jax.numpy as jnp, optax
def init(key):
    keys = jax.random.split(key, LAYERS + 1)
    hidden = [{{"w": jax.random.normal(k, (WIDTH, WIDTH)) / WIDTH ** 0.5, "b": jnp.zeros(WIDTH)}}
              for k in keys[:-1]]
    return {{"hidden": hidden, "out": {{"w": jax.random.normal(keys[-1], (WIDTH, 10)) / WIDTH ** 0.5,
                                      "b": jnp.zeros(10)}}}}
def loss_fn(params, x, y):
    for layer in params["hidden"]:
        x = jax.nn.relu(x @ layer["w"] + layer["b"])
    logits = x @ params["out"]["w"] + params["out"]["b"]
    return optax.softmax_cross_entropy_with_integer_labels(logits, y).mean()
tx = optax.adam(1e-3)
@jax.jit
def train_step(params, opt_state, x, y):
    loss, grads = jax.value_and_grad(loss_fn)(params, x, y)
    updates, opt_state = tx.update(grads, opt_state, params)
    return optax.apply_updates(params, updates), opt_state, loss
params = init(jax.random.key(0))
opt_state = tx.init(params)
for i in range(3):
    params, opt_state, loss = train_step(params, opt_state, *batch_of(i))
print(float(loss))
""",
    "nnx.jit": COMMON + """
import optax
from flax import nnx
class MLP(nnx.Module):
    def __init__(self, rngs):
        self.hidden = nnx.List([nnx.Linear(WIDTH, WIDTH, rngs=rngs) for _ in range(LAYERS)])
        self.out = nnx.Linear(WIDTH, 10, rngs=rngs)
    def __call__(self, x):
        for layer in self.hidden:
            x = nnx.relu(layer(x))
        return self.out(x)
def loss_fn(model, x, y):
    return optax.softmax_cross_entropy_with_integer_labels(model(x), y).mean()
@nnx.jit
def train_step(model, optimizer, x, y):
    loss, grads = nnx.value_and_grad(loss_fn)(model, x, y)
    optimizer.update(model, grads)
    return loss
model = MLP(nnx.Rngs(0))
optimizer = nnx.Optimizer(model, optax.adam(1e-3), wrt=nnx.Param)
for i in range(3):
    loss = train_step(model, optimizer, *batch_of(i))
print(float(loss))
""",
    "eqx.filter_jit": COMMON + """
import equinox as eqx, jax, optax
model = eqx.nn.MLP(WIDTH, 10, WIDTH, LAYERS, activation=jax.nn.relu, key=jax.random.key(0))
tx = optax.adam(1e-3)
opt_state = tx.init(eqx.filter(model, eqx.is_inexact_array))
def loss_fn(model, x, y):
    return optax.softmax_cross_entropy_with_integer_labels(jax.vmap(model)(x), y).mean()
@eqx.filter_jit
def train_step(model, opt_state, x, y):
    loss, grads = eqx.filter_value_and_grad(loss_fn)(model, x, y)
    updates, opt_state = tx.update(grads, opt_state, eqx.filter(model, eqx.is_inexact_array))
    return eqx.apply_updates(model, updates), opt_state, loss
for i in range(3):
    model, opt_state, loss = train_step(model, opt_state, *batch_of(i))
print(float(loss))
""",
}


def measure(script: Path, memory: str) -> tuple[float, dict]:
    return timed_json([sys.executable, "-m", "memscope", "fit", "--format", "json",
                       "--memory", memory, str(script)])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_size_options(parser, "mlp", ("layers", "width", "batch"))
    parser.add_argument("--memory", default="512MiB")
    parser.add_argument("--repeat", type=int, default=1)
    a, _ = parse_with_size(parser)
    runs: dict[str, list[tuple[float, dict]]] = {name: [] for name in PROGRAMS}
    with tempfile.TemporaryDirectory() as folder:
        scripts = {}
        for i, (name, text) in enumerate(PROGRAMS.items()):
            scripts[name] = Path(folder) / f"step{i}.py"
            scripts[name].write_text(text.format(layers=a.layers, width=a.width, batch=a.batch))
        for _ in range(a.repeat):  # interleaved, so drift hits every program alike
            for name, script in scripts.items():
                runs[name].append(measure(script, a.memory))
    base = statistics.median(f["seconds"] for _, f in runs["jax.jit"])
    print(f"MLP: {a.layers} layers of {a.width}, batch {a.batch}, Adam; budget {a.memory}; "
          f"{a.repeat} runs each, interleaved; {os.cpu_count()} cores")
    print(f"{'step':<16} {'largest':>8} {'compiles':>9} {'forecast s':>11} {'s/compile':>10} "
          f"{'wall s':>7} {'forecast ratio':>15}")
    for name, done in runs.items():
        seconds = statistics.median(f["seconds"] for _, f in done)
        wall = statistics.median(w for w, _ in done)
        last = done[-1][1]
        print(f"{name:<16} {last['largest']!s:>8} {last['compiles']:>9} {seconds:>11.2f} "
              f"{seconds / max(last['compiles'], 1):>10.2f} {wall:>7.1f} {seconds / base:>15.2f}")


if __name__ == "__main__":
    main()
