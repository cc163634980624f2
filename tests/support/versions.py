"""Gates for tests of behaviour that a JAX series introduced or dropped.

A test that encodes one series' behaviour is marked with the version that
changed it, so each series runs the tests that hold for it, and a skip says why.
"""

from __future__ import annotations

import jax
import pytest

from memscope import _compat

JAX_SERIES = _compat.series(jax.__version__) or (0, 0)


def jax_since(series: tuple[int, int], what: str) -> pytest.MarkDecorator:
    """Run the test on JAX ``series`` and later; ``what`` came in that series."""
    return pytest.mark.skipif(
        series > JAX_SERIES,
        reason=f"JAX {series[0]}.{series[1]} introduced {what}; this is {jax.__version__}")


def jax_before(series: tuple[int, int], what: str) -> pytest.MarkDecorator:
    """Run the test on JAX older than ``series``; ``what`` holds only there."""
    return pytest.mark.skipif(
        series <= JAX_SERIES,
        reason=f"{what} holds before JAX {series[0]}.{series[1]}; this is {jax.__version__}")


#: ``mlir._set_up_aliases``' second pass (a donated argument offered to XLA by
#: element count) exists from JAX 0.8; before, such an argument is not usable.
SAME_SIZE_DONORS = jax_since((0, 8), "donors paired by element count")
NO_SAME_SIZE_DONORS = jax_before((0, 8), "pairing donations by shape and dtype only")


def enable_x64(on: bool = True):
    """x64 for the calling thread only: ``jax.enable_x64`` from JAX 0.8, which 0.7
    spells ``jax.experimental.enable_x64``."""
    if hasattr(jax, "enable_x64"):
        return jax.enable_x64(on)
    from jax.experimental import enable_x64 as experimental

    return experimental(on)
