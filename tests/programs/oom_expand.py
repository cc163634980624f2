"""A jitted call whose output cannot be allocated, its input ready: a small call
first, then one whose output (4096 rows of argv's first number of float32
columns) is larger than the machine. On jaxlib 0.10 XLA:CPU gives the call's
output delayed memory, allocated only when the call runs; memscope once read its
address before that and aborted the process (``Check failed:
buffer_.IsConcrete()``).
"""

import sys

import jax
import jax.numpy as jnp

COLUMNS = int(sys.argv[1])


@jax.jit
def expand(x):
    return jnp.broadcast_to(x[:, None], (x.shape[0], COLUMNS)) * 2.0


print("small", float(expand(jnp.ones(1)).sum()))
print("huge", float(expand(jnp.ones(4096)).sum()))
