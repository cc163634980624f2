"""An Equinox MLP regressor with optax's Adam, its step ``eqx.filter_jit`` with
``donate="all-except-first"`` (the state and the batch donated), fed NumPy
batches: as Equinox's own examples write it."""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import optax

optim = optax.adam(3e-4)


@eqx.filter_jit(donate="all-except-first")
def make_step(model, opt_state, x, y):
    def loss(model, x, y):
        pred = jax.vmap(model)(x)
        return jnp.mean((pred - y) ** 2)

    loss_value, grads = eqx.filter_value_and_grad(loss)(model, x, y)
    updates, opt_state = optim.update(grads, opt_state, eqx.filter(model, eqx.is_inexact_array))
    model = eqx.apply_updates(model, updates)
    return loss_value, model, opt_state


def batch_of(n, seed=0):
    rng = np.random.default_rng(seed)
    return rng.normal(size=(n, 32)).astype(np.float32), rng.normal(size=(n, 1)).astype(np.float32)


def make(n):
    model = eqx.nn.MLP(in_size=32, out_size=1, width_size=128, depth=3,
                       key=jax.random.PRNGKey(0))
    opt_state = optim.init(eqx.filter(model, eqx.is_inexact_array))
    return make_step, (model, opt_state, *batch_of(n))


if __name__ == "__main__":
    step, (model, opt_state, _, _) = make(64)
    for i in range(4):
        loss, model, opt_state = step(model, opt_state, *batch_of(64, seed=i))
    print("loss", float(loss))
