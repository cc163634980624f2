"""Model-parallel SGD: the hidden layer's weights are split across devices.

A mesh axis "model" splits the first layer's columns (and the second layer's
rows) across every device, and XLA propagates the rest; the batch is replicated.
The step fixes its out_shardings to the state's own, so JAX can pair each
donated state leaf with its new value: every state leaf is `aliased`, and each
device holds only its slice. The buffer table shows each leaf's sharding and
its bytes per device.

Run it on eight simulated CPU devices (the default here when XLA_FLAGS is not
set): `memscope run sample_programs/model_parallel.py`.
"""

import argparse
import os

os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=8")

import jax  # after XLA_FLAGS: JAX reads it when it starts
import jax.numpy as jnp
from _data import batch, init_params, loss_fn
from jax.sharding import AxisType, NamedSharding
from jax.sharding import PartitionSpec as P


def sgd_step(params, momentum, x, y):
    loss, grads = jax.value_and_grad(loss_fn)(params, x, y)
    momentum = jax.tree.map(lambda m, g: 0.9 * m + g, momentum, grads)
    params = jax.tree.map(lambda p, m: p - 0.01 * m, params, momentum)
    return params, momentum, loss


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=20)
    args = parser.parse_args()
    mesh = jax.make_mesh((len(jax.devices()),), ("model",), axis_types=(AxisType.Auto,))
    layout = [{"w": NamedSharding(mesh, P(None, "model")), "b": NamedSharding(mesh, P("model"))},
              {"w": NamedSharding(mesh, P("model", None)), "b": NamedSharding(mesh, P())}]
    params = jax.device_put(init_params(jax.random.key(0)), layout)
    momentum = jax.tree.map(jnp.zeros_like, params)
    x, y = jax.device_put(batch(jax.random.key(1)), NamedSharding(mesh, P()))
    train_step = jax.jit(sgd_step, donate_argnums=(0, 1),
                         out_shardings=(layout, layout, NamedSharding(mesh, P())))
    for _ in range(args.steps):
        params, momentum, loss = train_step(params, momentum, x, y)
    print(f"final loss {float(loss):.6f}")
    return params


if __name__ == "__main__":
    params = main()  # the trained state lives on to the end, as a global
