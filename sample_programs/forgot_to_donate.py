"""SGD with momentum that forgets to donate its state.

Every step allocates fresh buffers for the new parameters and momentum while the
old ones stay alive until Python drops them: the training state is held twice.
`memscope run sample_programs/forgot_to_donate.py` shows every state leaf as
`not_donated` and every new state leaf as a `new` buffer. The step counter is
passed for logging but never read, so XLA prunes it.
"""

import argparse

import jax
import jax.numpy as jnp
from _data import batch, init_params, loss_fn


@jax.jit
def train_step(params, momentum, x, y, step):
    loss, grads = jax.value_and_grad(loss_fn)(params, x, y)
    momentum = jax.tree.map(lambda m, g: 0.9 * m + g, momentum, grads)
    params = jax.tree.map(lambda p, m: p - 0.01 * m, params, momentum)
    return params, momentum, loss


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=20)
    args = parser.parse_args()
    key = jax.random.key(0)
    params = init_params(key)
    momentum = jax.tree.map(jnp.zeros_like, params)
    x, y = batch(jax.random.key(1))
    for step in range(args.steps):
        params, momentum, loss = train_step(params, momentum, x, y, jnp.int32(step))
    print(f"final loss {float(loss):.6f}")
    return params


if __name__ == "__main__":
    params = main()  # the trained state lives on to the end, as a global
