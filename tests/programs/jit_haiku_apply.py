"""Two Haiku transforms whose ``apply`` (one factory's closure inside Haiku) the
program jits at two lines of its own, the second with a static argument."""

import haiku as hk
import jax
import jax.numpy as jnp


def forward(x):
    return hk.Linear(4)(x)


def predict(x, steps):
    for _ in range(steps):
        x = hk.Linear(8)(x)
    return x


model = hk.without_apply_rng(hk.transform(forward))
fast = hk.without_apply_rng(hk.transform(predict))
x = jnp.ones((2, 8))
params = model.init(jax.random.PRNGKey(0), x)
fast_params = fast.init(jax.random.PRNGKey(1), x, 2)
apply = jax.jit(model.apply)  # line 23
run = jax.jit(fast.apply, static_argnums=2)  # line 24
print(float(apply(params, x).sum() + run(fast_params, x, 2).sum()))
