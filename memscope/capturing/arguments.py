"""A call's top-level arguments in JAX's terms: positions, names, and flat leaves."""

from __future__ import annotations

import inspect
from collections.abc import Sequence
from typing import Any

import jax
import numpy as np

from memscope.capturing.keys import JitSpec, program_leaves
from memscope.variants.donation import Argument


def call_arguments(fun: Any, spec: JitSpec, args: tuple[Any, ...],
               kwargs: dict[str, Any]) -> tuple[Argument, ...]:
    """The call's dynamic top-level arguments, each with its flat leaves in JAX's order
    (positional arguments, then keyword arguments sorted by name), as its compiled
    program takes them (:func:`~memscope.capturing.keys.program_leaves`)."""
    params = parameters(fun)
    n = len(args)
    static = {i % n for i in spec.static_argnums if -n <= i < n}
    result = []
    start = 0

    def add(value: Any, position: int | None, name: str | None, by_name: bool) -> None:
        nonlocal start
        leaves = program_leaves(jax.tree_util.tree_leaves(value))
        result.append(Argument(position=position, name=name, by_name=by_name,
                               leaves=tuple(range(start, start + len(leaves))),
                               has_arrays=any(isinstance(x, jax.Array | np.ndarray
                                                         | jax.ShapeDtypeStruct)
                                              for x in leaves)))
        start += len(leaves)

    positional = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    for i, value in enumerate(args):
        if i in static:
            continue
        p = params[i] if params is not None and i < len(params) else None
        named = p is not None and p.kind in positional
        add(value, i, p.name if p is not None and named else None,
            p is not None and p.kind == inspect.Parameter.POSITIONAL_OR_KEYWORD)
    for name in sorted(kwargs):
        if name not in spec.static_argnames:
            add(kwargs[name], None, name, True)
    return tuple(result)


def argument_values(arguments: Sequence[Argument], args: tuple[Any, ...],
                     kwargs: dict[str, Any]) -> list[Any]:
    return [args[a.position] if a.position is not None else kwargs[a.name or ""]
            for a in arguments]


def parameters(fun: Any) -> list[inspect.Parameter] | None:
    try:
        return list(inspect.signature(fun).parameters.values())
    except (TypeError, ValueError):
        return None


def parameter_names(fun: Any) -> tuple[str, ...] | None:
    params = parameters(fun)
    if params is None:
        return None
    variadic = (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD)
    return tuple(p.name for p in params if p.kind not in variadic)
