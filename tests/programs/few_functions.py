"""A realistic training script with a few jitted functions: the transformer
sample's model (405 input leaves), a jitted initialisation, Adam's jitted init,
a train step that donates its batch too (no output can take it), and an eval
step. The default report of such a program must fit 60 lines."""

import functools
import sys
from pathlib import Path

import jax
import optax

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "sample_programs"))
from transformer_adam import init_params, loss_fn, make_batch, optimizer


@functools.partial(jax.jit, donate_argnames=("params", "opt_state", "batch"))
def train_step(params, opt_state, batch):
    loss, grads = jax.value_and_grad(loss_fn)(params, batch, 4)
    updates, opt_state = optimizer.update(grads, opt_state, params)
    return optax.apply_updates(params, updates), opt_state, loss


@jax.jit
def eval_step(params, batch):
    return loss_fn(params, batch, 4)


def main():
    params = jax.jit(init_params, static_argnums=(1, 2, 3))(jax.random.key(0), 8, 128, 64)
    opt_state = jax.jit(optimizer.init)(params)
    for step in range(4):
        batch = make_batch(jax.random.key(step), 8, 64)
        params, opt_state, _loss = train_step(params, opt_state, batch)
        if step % 2 == 1:
            print("eval", float(eval_step(params, make_batch(jax.random.key(99), 8, 64))))
    return params, opt_state


if __name__ == "__main__":
    params, opt_state = main()
