"""What a traced program's jaxpr, and JAX's listing of its residuals, say for
the checkpoint-policy variants (:mod:`memscope.variants.remat`): what a
differentiation saves, the checkpoints and names the user already wrote,
whether a function differentiates at all, and its size.

The jaxpr is walked through :func:`memscope._compat.stages.all_eqns` and the
residuals listed by :func:`memscope._compat.stages.saved_residual_listing`; the rest
reads JAX's public objects (``jax.checkpoint_policies``) and its own words.
"""

from __future__ import annotations

import contextlib
import functools
import re
import types
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import jax

from memscope import _compat


@dataclass(frozen=True)
class SavedResidual:
    """One value JAX's forward pass saves for the backward pass, as
    ``jax.ad_checkpoint.saved_residuals`` lists it (``text`` is its own words)."""

    shape: tuple[int, ...]
    dtype: str
    text: str
    primitive: str | None
    source: str | None
    function: str | None


_RESIDUAL_TEXT = re.compile(
    r"^(?:output of (?:jitted function '(?P<jit>[^']*)'|(?P<prim>\S+))|named '[^']*')"
    r" from (?P<file>.+?):(?P<line>\d+)(?::\d+)? \((?P<fn>[^)]*)\)$")


def saved_residuals(fun: Callable[..., Any], primals: tuple[Any, ...]
                    ) -> list[SavedResidual]:
    """What differentiating ``fun`` at ``primals`` saves, by JAX's own
    ``saved_residuals`` (``primals`` may be tracers of an enclosing trace).

    JAX words each residual as ``output of dot_general from file.py:12:4 (fn)``,
    ``from the argument x``, ``from a constant``, ...; the primitive and source
    line are read from those words, the only form all supported series share.
    """
    listing = _compat.stages.saved_residual_listing(fun, primals)
    result = []
    for aval, text in listing:
        match = _RESIDUAL_TEXT.match(text)
        prim = None if match is None else (match["prim"] or "jit")
        where = None if match is None else f"{match['file']}:{match['line']}"
        result.append(SavedResidual(
            shape=tuple(int(d) for d in aval.shape), dtype=str(aval.dtype), text=text,
            primitive=prim if prim is not None or match is None else "name",
            source=where, function=None if match is None else match["fn"]))
    return result


def checkpoint_policies(jaxpr: Any) -> tuple[tuple[str, ...], bool]:
    """The policies of the ``jax.checkpoint`` equations in ``jaxpr`` (a closed
    jaxpr), by the policy function's name (``"none"`` for no policy), and
    whether it has a ``scan``: the rematerialization the user already wrote."""
    names: list[str] = []
    scan = False
    for eqn in _compat.stages.all_eqns(jaxpr):
        if eqn.primitive.name in ("checkpoint", "remat2", "remat"):
            policy = eqn.params.get("policy")
            names.append(policy_name(policy))
        scan = scan or eqn.primitive.name == "scan"
    return tuple(dict.fromkeys(names)), scan


def transposes(jaxpr: Any) -> bool:
    """Whether ``jaxpr`` (a closed jaxpr) holds a reverse-mode derivative.

    JAX names what it transposes ``transpose(jvp(...))`` in each equation's
    name stack (0.7 to 0.10); a function with no such equation differentiates
    nothing in reverse mode, and is not traced again to look for it.
    """
    return any("transpose(" in str(eqn.source_info.name_stack)
               for eqn in _compat.stages.all_eqns(jaxpr))


def policy_name(policy: Any) -> str:
    """A checkpoint policy by its ``jax.checkpoint_policies`` name where it is one,
    else by the ``jax.checkpoint_policies`` function that made it, else by its
    own name.

    The policies a function makes are closures on JAX 0.7 to 0.9
    (``save_only_these_names.<locals>.policy``) and, one by one, frozen
    dataclasses from 0.10: ``SaveOnlyTheseNames`` and ``SaveAnyNamesButThese``
    (0.10), ``SaveAndOffloadOnlyTheseNames`` and ``OffloadDotWithNoBatchDims``
    (0.11, read, not run), each named as its function in snake case. JAX 0.10
    also makes the dot policies objects that print as their class; they compare
    equal to ``jax.checkpoint_policies``' own.
    """
    if policy is None:
        return "none"
    policies = jax.checkpoint_policies
    standard = ("everything_saveable", "nothing_saveable", "dots_saveable",
                "dots_with_no_batch_dims_saveable")  # before aliases (checkpoint_dots)
    for name in (*standard, *dir(policies)):
        with contextlib.suppress(Exception):
            known = getattr(policies, name)
            if not name.startswith("_") and (known is policy or known == policy):
                return name
    maker = str(getattr(policy, "__qualname__", "")).split(".<locals>.")[0]
    if isinstance(policy, types.FunctionType):
        return maker if callable(getattr(policies, maker, None)) else policy.__name__
    made_by = re.sub(r"(?<!^)(?=[A-Z])", "_", type(policy).__name__).lower()
    return made_by if callable(getattr(policies, made_by, None)) else type(policy).__name__


def checkpoint_names(jaxpr: Any) -> tuple[str, ...]:
    """The names ``jax.ad_checkpoint.checkpoint_name`` gave values in ``jaxpr``
    (a closed jaxpr), in order of first use (the ``name`` primitive, 0.7 to 0.10)."""
    names = [str(eqn.params.get("name")) for eqn in _compat.stages.all_eqns(jaxpr)
             if eqn.primitive.name == "name" and eqn.params.get("name") is not None]
    return tuple(dict.fromkeys(names))


def count_equations(jaxpr: Any, limit: int) -> int:
    """The equations of ``jaxpr`` and the jaxprs inside it, counted up to ``limit``."""
    count = 0
    for _ in _compat.stages.all_eqns(jaxpr):
        count += 1
        if count >= limit:
            break
    return count


def traced_once(fun: Callable[..., Any], primals: tuple[Any, ...]) -> Callable[..., Any]:
    """``fun`` traced once at ``primals``, as a function that replays its jaxpr.

    Some differentiated functions may be called only once per differentiation
    (``nnx.grad``'s pops the states its wrapper split off; a ``lu.WrappedFun``
    fills its stores). Listing residuals and differentiating then use the
    replay; ``eval_jaxpr`` binds each equation under its own source info, so
    the residuals keep the user's lines.
    """
    closed, shape = jax.make_jaxpr(fun, return_shape=True)(*primals)
    out_tree = jax.tree_util.tree_structure(shape)

    def replay(*args: Any) -> Any:
        flat = jax.tree_util.tree_leaves(args)
        return jax.tree_util.tree_unflatten(
            out_tree, _compat.stages.eval_jaxpr(closed, *flat))

    return functools.wraps(fun)(replay) if hasattr(fun, "__name__") else replay


def lowers_with_foreign_rules(jaxpr: Any) -> bool:
    """True when lowering ``jaxpr`` runs code from outside JAX: a lowering rule
    registered with ``mlir.register_lowering`` by the program or a library
    (Equinox's primitives), directly or through ``mlir.lower_fun(impl)``. Such
    code may count or print, as Equinox's own tests do."""
    seen: set[Any] = set()
    for eqn in _compat.stages.all_eqns(jaxpr):
        primitive = eqn.primitive
        if primitive in seen:
            continue
        seen.add(primitive)
        if any(_runs_foreign_code(rule) for rule in _compat.stages.lowering_rules(primitive)):
            return True
    return False


def _runs_foreign_code(fun: Any, depth: int = 3) -> bool:
    """Whether ``fun``, or a function it closes over or is a partial of (to
    ``depth``), is defined outside JAX."""
    while isinstance(fun, functools.partial):
        fun = fun.func
    module = getattr(fun, "__module__", None) or ""
    if module.split(".")[0] not in ("jax", "jaxlib"):
        return True
    if depth == 0:
        return False
    for cell in getattr(fun, "__closure__", None) or ():
        try:
            value = cell.cell_contents
        except ValueError:  # an empty cell
            continue
        if callable(value) and not isinstance(value, type) \
                and _runs_foreign_code(value, depth - 1):
            return True
    return False
