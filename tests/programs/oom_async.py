"""A jitted call whose output cannot be allocated (larger than the machine).

``--pending``: the call's input is still being computed when the call is made,
so XLA:CPU allocates the output only when the call runs, and the call returns
an array that holds the error; without it the call itself raises. ``--catch``
catches JAX's error and ends normally. The size is argv's first number (bytes).
"""

import sys

import jax
import jax.numpy as jnp

SIZE = int(sys.argv[1])
PENDING = "--pending" in sys.argv
CATCH = "--catch" in sys.argv


@jax.jit
def slow(a):
    return (a @ a @ a @ a).sum(keepdims=True)


@jax.jit
def grow(x):
    return jnp.zeros((SIZE // 4,), jnp.float32) + x[0]


# Large enough that the input is still being computed when grow is dispatched,
# under python and under memscope alike, even on a loaded machine. slow's first
# call is made (and finished) first: on jaxlib 0.10 memscope waits for a first
# call's outputs on CPU (they have no buffer until it runs), so only a later
# call's output is still pending as under python.
a = jnp.ones((2000, 2000))
if PENDING:
    slow(a).block_until_ready()
x = slow(a) if PENDING else jnp.ones((1,))
print("input ready:", x.is_ready() if PENDING else True)
try:
    out = grow(x)
    print("grow returned")
    out.block_until_ready()
except Exception as e:
    print("caught", type(e).__name__, str(e).splitlines()[0])
    if not CATCH:
        raise
print("done")
