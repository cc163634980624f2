"""A traced call held for work after it, without the program's arrays.

Held for pending work (a variant's lowering, a read off the program's path), a
``jax.stages.Traced`` would keep the arrays the function closes over (a table,
an embedding) alive after the program let go of them. :class:`WeakConsts`
holds it with weak references in their place; the values themselves are
reached through :func:`memscope._compat.stages.traced_consts` and
:func:`memscope._compat.stages.with_consts`.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass
from typing import Any

import jax
import numpy as np

from memscope import _compat


@dataclass(frozen=True)
class WeakConsts:
    """A traced call split in two: ``view``, the traced program with none of the
    arrays it closes over (``None`` in their place: its jaxpr's constants, and
    from JAX 0.8 the ``Traced``'s hoisted ones) nor the call's; and weak
    references to those arrays, in their places. The view serves reading what
    was compiled (argument and result info, names, effects, Refs); :meth:`traced`
    puts the arrays back for a lowering, while the program still holds them.

    Held for pending work, the traced program itself would keep the program's
    closed-over arrays (a table, an embedding) alive after the program let go of
    them; JAX's own caches of a function hold them only as long as the function
    lives. Refs it closes over stay in the view (the reading names them)."""

    view: Any
    jaxpr_refs: tuple[weakref.ref[Any] | None, ...]
    hoisted_refs: tuple[weakref.ref[Any] | None, ...] | None

    def traced(self) -> Any:
        """The traced program with its arrays, for lowering it now; ``None`` where
        one of them is gone (the program let go of it, and of the function)."""
        jaxpr_consts, hoisted = _compat.stages.traced_consts(self.view)
        consts = _joined(jaxpr_consts, self.jaxpr_refs)
        again = (None if self.hoisted_refs is None or hoisted is None
                 else _joined(hoisted, self.hoisted_refs))
        if consts is None or (self.hoisted_refs is not None and again is None):
            return None
        return _compat.stages.with_consts(self.view, consts, again)


def weak_consts(traced: Any) -> WeakConsts:
    """``traced`` (a ``jax.stages.Traced``) split from the arrays it holds
    (:class:`WeakConsts`)."""
    traced = _compat.stages.without_call_arrays(traced)
    jaxpr_consts, hoisted = _compat.stages.traced_consts(traced)
    consts, refs = _split(jaxpr_consts)
    hoisted_refs = None
    kept = None
    if hoisted is not None:
        kept, hoisted_refs = _split(hoisted)
    return WeakConsts(_compat.stages.with_consts(traced, consts, kept), refs, hoisted_refs)


def reading_view(traced: Any) -> Any:
    """``traced`` holding none of the arrays the function closes over, nor the
    call's: for reading what was compiled, never for lowering again
    (:class:`WeakConsts`)."""
    return weak_consts(traced).view


def _split(values: Any) -> tuple[list[Any], tuple[weakref.ref[Any] | None, ...]]:
    kept: list[Any] = []
    refs: list[weakref.ref[Any] | None] = []
    for v in values:
        if isinstance(v, jax.Array | np.ndarray) and not _compat.values.is_ref(v):
            kept.append(None)
            refs.append(weakref.ref(v))
        else:
            kept.append(v)
            refs.append(None)
    return kept, tuple(refs)


def _joined(values: Any, refs: tuple[weakref.ref[Any] | None, ...]) -> list[Any] | None:
    out = []
    for v, ref in zip(values, refs, strict=True):
        if ref is None:
            out.append(v)
            continue
        value = ref()
        if value is None:
            return None
        out.append(value)
    return out
