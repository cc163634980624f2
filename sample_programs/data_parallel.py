"""Data-parallel SGD over every device, with automatic sharding.

The batch is split along a mesh axis "data"; parameters and momentum are
replicated. The step donates its state but gives no out_shardings, so on more
than one device JAX leaves every alias to XLA: each state leaf is a `donor`,
and XLA decides whether the new state is written into it. memscope says which
it did, and why JAX made them donors.

Run it on eight simulated CPU devices (the default here when XLA_FLAGS is not
set): `memscope run sample_programs/data_parallel.py`.
"""

import argparse
import os

os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=8")

import jax  # after XLA_FLAGS: JAX reads it when it starts
import jax.numpy as jnp
from _data import batch, init_params, loss_fn
from jax.sharding import AxisType, NamedSharding
from jax.sharding import PartitionSpec as P


def train_step(params, momentum, x, y):
    loss, grads = jax.value_and_grad(loss_fn)(params, x, y)
    momentum = jax.tree.map(lambda m, g: 0.9 * m + g, momentum, grads)
    params = jax.tree.map(lambda p, m: p - 0.01 * m, params, momentum)
    return params, momentum, loss


train_step = jax.jit(train_step, donate_argnames=("params", "momentum"))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=20)
    args = parser.parse_args()
    mesh = jax.make_mesh((len(jax.devices()),), ("data",), axis_types=(AxisType.Auto,))
    replicated = NamedSharding(mesh, P())
    by_rows = NamedSharding(mesh, P("data"))
    params = jax.device_put(init_params(jax.random.key(0)), replicated)
    momentum = jax.tree.map(jnp.zeros_like, params)
    x, y = jax.device_put(batch(jax.random.key(1)), by_rows)
    for _ in range(args.steps):
        params, momentum, loss = train_step(params, momentum, x, y)
    print(f"final loss {float(loss):.6f}")
    return params


if __name__ == "__main__":
    params = main()  # the trained state lives on to the end, as a global
