"""A step, then lines printed: more than a pipe holds, so a reader that goes
away after the first line meets the program's own print (issue 66)."""

import jax
import jax.numpy as jnp

step = jax.jit(lambda x: x * 2)
y = step(jnp.ones(1024))
for i in range(50000):  # about 1 MB: far more than a pipe or head's read holds
    print(f"line {i}: {float(y[0])}")
