"""One factory's closures, jitted apart at two lines: two programs, two functions."""

import jax
import jax.numpy as jnp


def make(scale):
    return lambda x: x * scale


double = jax.jit(make(2.0))  # line 11
triple = jax.jit(make(3.0))  # line 12
x = jnp.ones((8,))
print(float(double(x).sum() + triple(x).sum()))
