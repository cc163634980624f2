"""An Equinox MLP trained with eqx.filter_jit and optax, as Equinox's own
examples are: a few steps. Compile-bound."""

import equinox as eqx
import jax
import jax.numpy as jnp
import optax

model = eqx.nn.MLP(64, 1, width_size=256, depth=3, key=jax.random.key(0))
optimizer = optax.adamw(1e-3)
opt_state = optimizer.init(eqx.filter(model, eqx.is_array))


@eqx.filter_jit
def step(model, opt_state, x, y):
    def loss(m):
        return jnp.mean((jax.vmap(m)(x) - y) ** 2)

    value, grads = eqx.filter_value_and_grad(loss)(model)
    updates, opt_state = optimizer.update(grads, opt_state, eqx.filter(model, eqx.is_array))
    return eqx.apply_updates(model, updates), opt_state, value


x = jax.random.normal(jax.random.key(1), (256, 64))
y = jnp.sin(x.sum(axis=1, keepdims=True))
for _ in range(10):
    model, opt_state, value = step(model, opt_state, x, y)
print(f"loss {float(value):.4f}")
