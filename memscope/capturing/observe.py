"""What a first call's buffers show, read as integers while the call is at hand.

The device address of every input and output buffer, and whether each input was
deleted (donated); the pure check of what they mean is
:mod:`memscope.analysis.observed`. An address is read only where the buffer
exists (:func:`no_buffer`), and the per-device arrays a read leaves behind are
noted, for the run's samples to skip (:func:`is_address_view`).
"""

from __future__ import annotations

import contextlib
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

import jax

from memscope import _compat
from memscope.analysis.observed import Addresses, Observation


@dataclass(frozen=True)
class CallFailed:
    """A call's computation failed: its error, and its outputs (they hold the error)."""

    error: Exception
    outputs: tuple[Any, ...] = ()


def observe(before: list[Addresses], leaves: Sequence[Any], out: Any
            ) -> Observation | CallFailed:
    """The call's buffers as integers, or the error its computation ended in
    (its outputs hold it, for the program to meet where it reads them).

    On CPU a first call's outputs still being computed may have no buffer yet
    (:func:`allocated_late`: XLA:CPU allocates them when the
    call runs on jaxlib 0.10, and on the others where an input was pending or,
    under load, the call was queued): they are waited for, once per signature,
    and read before the program can drop them. An input
    left unread before the call because it was still being computed (not
    donated: its buffer did not move) is read now, waited for. What the
    program computes, and where it meets its errors, stay."""
    outputs = jax.tree_util.tree_leaves(out)
    arrays = [y for y in outputs if isinstance(y, jax.Array) and not y.is_deleted()]
    deleted = tuple(x.is_deleted() if isinstance(x, jax.Array) else None for x in leaves)
    refs = [x if _compat.values.is_ref(x) else None for x in leaves]
    wait = any(allocated_late(y) for y in arrays)
    failure = next((f for y in arrays if (f := buffer_failure(y, wait=wait))), None)
    if failure is not None:
        return CallFailed(failure, tuple(arrays))
    before = [addresses(x, wait=True) if seen is None and isinstance(x, jax.Array) else seen
              for seen, x in zip(before, leaves, strict=True)]
    return Observation(tuple(before), deleted, tuple(addresses(y, wait=True) for y in outputs),
                       refs_after=tuple(None if r is None else addresses(r) for r in refs))


def watched_call(entry: Any, call: Callable[[], Any], leaves: Sequence[Any]) -> Any:
    """Run ``call``, the call of ``entry``'s signature after the first, where
    :attr:`Entry.watch_next` asks for it, and keep its buffers, read as the
    first call's are, as ``entry.observation_again``; the call's result.

    Unlike a first call's, they are read at once: the next call may donate this
    one's outputs, and then their addresses are gone. So where the call's inputs
    or outputs are still being computed, this waits for them, once per
    signature, and only for a signature whose first call showed a miss. Where a
    computation failed, nothing is kept (the program meets the error).
    """
    entry.watch_next = False
    arrays = [x for x in leaves if isinstance(x, jax.Array) and not x.is_deleted()]
    if any(buffer_failure(x, wait=True) for x in arrays):
        return call()
    before = [addresses(x) for x in leaves]
    out = call()
    outputs = [y for y in jax.tree_util.tree_leaves(out)
               if isinstance(y, jax.Array) and not y.is_deleted()]
    if not any(buffer_failure(y, wait=True) for y in outputs):
        seen = observe(before, leaves, out)
        if isinstance(seen, Observation):
            entry.observation_again = seen
    return out


def closed_refs_seen(seen: Observation | CallFailed, handles: Any,
                     before: dict[int, Addresses]) -> Observation | CallFailed:
    """``seen`` with the buffers of the Refs the call's program closes over:
    before the call where memscope saw the Ref then (``before``, by ``id``), and
    now. The Refs are read and let go."""
    if not isinstance(seen, Observation):
        return seen
    try:
        closed = _compat.values.closed_over_refs(handles.lowered)
    except Exception:  # never let the measurement break the program
        return seen
    if not closed:
        return seen
    return replace(seen, closed_before=tuple(before.get(id(r)) for r in closed),
                   closed_after=tuple(addresses(r) for r in closed))


def written_back_seen(seen: Observation | CallFailed, handles: Any,
                      values: Sequence[Any]) -> Observation | CallFailed:
    """``seen`` with the arrays JAX wrote back into the mutable hijax values of
    the call after it (JAX 0.7 to 0.10), as its first outputs, in its compiled
    program's order: those of the values its function closes over, then of
    ``values`` (the call's flat leaves). Read now, just after the call."""
    try:
        written = [a for x in (*_compat.values.hoisted_consts(handles.traced), *values)
                   if _compat.values.writes_back(x) for a in _compat.values.lo_values(x) or ()]
    except Exception:  # never let the measurement break the program
        return seen
    if not written:
        return seen
    if isinstance(seen, Observation):
        return replace(seen, outputs_after=(*(addresses(a, wait=True) for a in written),
                                            *seen.outputs_after))
    return seen


def watch_refs(leaves: Sequence[Any], handles: Any
               ) -> tuple[tuple[weakref.ref[Any] | None, ...], tuple[weakref.ref[Any] | None, ...]]:
    """Weak references to a first call's Refs: its Ref arguments (``None`` for
    other leaves), and the Refs its program closes over; read again at the
    run's end (:func:`at_end`), never kept alive."""
    given = tuple(weakref.ref(x) if _compat.values.is_ref(x) else None for x in leaves)
    if not any(r is not None for r in given):
        given = ()
    closed: tuple[weakref.ref[Any] | None, ...] = ()
    if handles is not None:
        with contextlib.suppress(Exception):
            closed = tuple(weakref.ref(r) for r in _compat.values.closed_over_refs(handles.lowered))
    return given, closed


def at_end(seen: Observation, given: Sequence[weakref.ref[Any] | None],
           closed: Sequence[weakref.ref[Any] | None]) -> Observation:
    """``seen`` with the watched Refs' buffers now that the run has ended (after
    every call; waiting for them is harmless then)."""
    def now(ref: weakref.ref[Any] | None) -> Addresses:
        value = None if ref is None else ref()
        return None if value is None else addresses(value, wait=True)
    return replace(seen, refs_end=tuple(now(r) for r in given),
                   closed_end=tuple(now(r) for r in closed))


def leaf_sharding(x: Any) -> Any:
    """A flat leaf's sharding (a Ref's, of its buffer; a ``jax.ShapeDtypeStruct``'s
    as given); ``None`` for a non-array."""
    if isinstance(x, jax.ShapeDtypeStruct):
        return x.sharding if isinstance(x.sharding, jax.sharding.Sharding) else None
    if isinstance(x, jax.Array) or _compat.values.is_ref(x):
        try:
            return x.sharding
        except Exception:  # a Ref built of several arrays
            return None
    return None


def addresses(x: Any, *, wait: bool = False) -> Addresses:
    """The device address of each addressable shard of ``x`` (of the buffer a
    ``jax.Ref`` holds now, waited for where pending), as integers; ``None``
    where it has none to read now (``wait``: see
    :func:`no_buffer`)."""
    if _compat.values.is_ref(x):
        buf = _compat.values.ref_array(x)
        if buf is None or buf.is_deleted() or no_buffer(buf, wait=True):
            return None
        return _compat.values.ref_addresses(x, note_address_views)
    if (not isinstance(x, jax.Array) or x.is_deleted()
            or no_buffer(x, wait=wait)):
        return None  # a failed computation's array has no buffer to read (buffer_failure)
    try:
        return _compat.values.buffer_addresses(x, note_address_views)
    except Exception:  # a backend without raw addresses
        return None


def buffer_failure(x: Any, *, wait: bool = False) -> Exception | None:
    """The error ``x``'s computation ended in; ``None`` when it did not, or when it
    is still running and ``wait`` is false.

    An array whose computation failed holds the error instead of a buffer, and
    reading its address aborts the process (``Check failed:
    buffer_.IsConcrete()``). A ready array is checked at once; the error, caught
    here, stays in the array for the program to meet where it would have
    without memscope.
    """
    x = _compat.values.physical_array(x)
    try:
        if wait or x.is_ready():
            x.block_until_ready()  # at once when ready; raises the error it holds
    except Exception as e:  # the computation's own error, held by the array
        return e
    return None


def allocated_late(x: Any) -> bool:
    """True when ``x``, a pending array on CPU, may have no buffer yet: XLA:CPU
    allocates a call's outputs only when the call runs on jaxlib 0.10 always
    (``PjRtCpuClient::AllocateRawBufferForExecute`` makes delayed memory), and
    on the other series where an input was pending or, on a loaded machine,
    where the call was queued (seen on 0.7).
    Reading the address of such a buffer before it exists, or of one whose
    allocation failed (RESOURCE_EXHAUSTED), aborts the process (``Check
    failed: buffer_.IsConcrete()``)."""
    x = _compat.values.physical_array(x)
    return not x.is_ready() and any(d.platform == "cpu" for d in x.devices())


def no_buffer(x: Any, *, wait: bool = False) -> bool:
    """True where ``x``'s buffer address must not be read now: it may not exist
    yet (:func:`allocated_late`), or its computation failed (the error stays in
    the array for the program). ``wait``: such an array is waited for first
    (a first call's inputs and outputs, once per signature); otherwise it is
    not read (waiting would move where the program meets its own errors)."""
    pending = allocated_late(x)
    if pending and not wait:
        return True
    return buffer_failure(x, wait=pending) is not None


#: Where an address read leaves per-device arrays behind on an array
#: (:func:`memscope._compat.values.buffer_addresses`), they are noted (weakly)
#: so that memscope's own samples skip them.
_VIEWS: dict[int, weakref.ref[Any]] = {}


def note_address_views(x: Any) -> None:
    """Remember the per-device arrays an address read left on ``x`` (by weak
    reference), for :func:`is_address_view`."""
    for view in _compat.values.address_views(x):
        _VIEWS[id(view)] = weakref.ref(view)
    if len(_VIEWS) > 100_000:
        for key in [k for k, ref in _VIEWS.items() if ref() is None]:
            del _VIEWS[key]


def is_address_view(a: Any) -> bool:
    """True for a per-device array an address read of memscope's left behind."""
    if not _VIEWS:
        return False
    ref = _VIEWS.get(id(a))
    return ref is not None and ref() is a
