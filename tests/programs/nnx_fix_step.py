"""A Flax NNX step the loop calls again with the same model and optimizer:
nnx.jit writes their new state back into the same objects, so donating them
is safe (issue 66: memscope fix refused it)."""

import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx

model = nnx.Linear(64, 64, rngs=nnx.Rngs(0))
optimizer = nnx.Optimizer(model, optax.adam(1e-3), wrt=nnx.Param)


@nnx.jit
def train_step(model, optimizer, x, y):
    def loss_fn(m):
        return jnp.mean((m(x) - y) ** 2)

    loss, grads = nnx.value_and_grad(loss_fn)(model)
    optimizer.update(model, grads)
    return loss


x = np.ones((32, 64), np.float32)
y = np.zeros((32, 64), np.float32)
for _ in range(5):
    loss = train_step(model, optimizer, x, y)
print(float(loss), float(jnp.sum(model.kernel[...])))
