"""A framework's jit wrapper given to :func:`memscope.analyze`: its ``jax.jit``
object measured for one call made through the wrapper's own code, so the call
is read in the user's terms (:mod:`memscope.capturing.wrappers`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from memscope import _frameworks
from memscope.capturing.jit import MeasuredJit


@dataclass(frozen=True)
class AnalyzedWrapper:
    """A framework's jit wrapper given to :func:`memscope.analyze`: its ``jax.jit``
    object, measured for one call through the wrapper's own code."""

    wrapper: Any
    attribute: str
    label: str

    def measured(self, session: Any) -> Any:
        """Within the block, the wrapper calls memscope's stand-in for its jit."""
        real = getattr(self.wrapper, self.attribute)
        stand_in = MeasuredJit(real, real.__wrapped__, session)
        return _frameworks.calling(self.wrapper, self.attribute, stand_in)


def analyzed_wrapper(obj: Any) -> AnalyzedWrapper | None:
    """``obj`` as a framework's jit wrapper (:func:`memscope._frameworks.inner_jit`);
    ``None`` for anything else."""
    found = _frameworks.inner_jit(obj)
    if found is None:
        return None
    attribute, maker = found
    return AnalyzedWrapper(obj, attribute, f"an {maker} function")
