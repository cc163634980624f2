"""Data-parallel SGD across processes under jax.distributed.

Each process holds its share of the devices; the mesh spans them all. Run one
process per host (here: per shell, on loopback, with CPU collectives), each
under memscope, then merge their reports:

    memscope run -o r0.json sample_programs/multi_process.py --processes 2 --process-id 0 &
    memscope run -o r1.json sample_programs/multi_process.py --processes 2 --process-id 1
    memscope merge -o all.json r0.json r1.json

With no --processes it runs as one process on the local devices (eight
simulated CPU devices when XLA_FLAGS is not set).
"""

import argparse
import os

os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=8")

import jax  # after XLA_FLAGS: JAX reads it when it starts
from _data import batch, init_params, loss_fn
from jax.sharding import AxisType, NamedSharding
from jax.sharding import PartitionSpec as P


def train_step(params, x, y):
    loss, grads = jax.value_and_grad(loss_fn)(params, x, y)
    return jax.tree.map(lambda p, g: p - 0.05 * g, params, grads), loss


train_step = jax.jit(train_step, donate_argnums=0)


def global_array(value, sharding):
    """Every process builds the same global array from its own copy of ``value``."""
    return jax.make_array_from_callback(value.shape, sharding, lambda index: value[index])


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--processes", type=int, default=1)
    parser.add_argument("--process-id", type=int, default=0)
    parser.add_argument("--port", type=int, default=12355)
    args = parser.parse_args()
    if args.processes > 1:
        jax.config.update("jax_cpu_collectives_implementation", "gloo")
        jax.distributed.initialize(coordinator_address=f"127.0.0.1:{args.port}",
                                   num_processes=args.processes, process_id=args.process_id)
    mesh = jax.make_mesh((jax.device_count(),), ("data",), axis_types=(AxisType.Auto,))
    replicated, by_rows = NamedSharding(mesh, P()), NamedSharding(mesh, P("data"))
    params = jax.tree.map(lambda p: global_array(p, replicated), init_params(jax.random.key(0)))
    x, y = (global_array(a, by_rows) for a in batch(jax.random.key(1)))
    for _ in range(args.steps):
        params, loss = train_step(params, x, y)
    print(f"process {jax.process_index()} of {jax.process_count()}: final loss "
          f"{float(loss):.6f}")
    return params


if __name__ == "__main__":
    params = main()  # the trained state lives on to the end, as a global
