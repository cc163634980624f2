"""bisect_transformer's step, with the losses of its steps stacked by
``jax.lax.stack``, which JAX 0.10.1 added: on JAX 0.10.0 and older it fails at
import, so memscope bisect narrows a range that starts there."""

import jax
from bisect_transformer import batch, init, train_step
from jax.lax import stack  # new in JAX 0.10.1


def main():
    params = init(jax.random.key(0))
    losses = []
    for i in range(3):
        params, value = train_step(params, batch(i))
        losses.append(value)
    print("losses", stack(losses))


if __name__ == "__main__":
    main()
