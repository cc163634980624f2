"""What memscope reads of the program's values: tracers, a key array's data,
device addresses (read through a twin, so that arrays keep nothing
from the read), Refs and hijax values, and leaf sizes and sharding keys.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import jax
import numpy as np

from memscope._compat import _jax
from memscope._compat._jax import _JAX_SERIES


def is_tracer(x: Any) -> bool:
    """True for a value being traced: a ``jax.Array`` by ``isinstance``, yet with
    no buffer, sharding or deletion state to read."""
    return isinstance(x, _jax.core.Tracer)


def physical_array(x: Any) -> Any:
    """The array that holds ``x``'s buffer: a PRNG key array's data, a uint32
    array of its own (its private ``_base_array``); else ``x`` itself."""
    return getattr(x, "_base_array", x)


def partition_spec_text(spec: Any) -> str:
    """A ``PartitionSpec`` as JAX 0.9 and later print it: ``P('data', None)``.

    JAX 0.7 and 0.8 print ``PartitionSpec('data', None)``; one spelling keeps
    reports (and ``memscope diff`` across versions) comparable.
    """
    text = str(spec)
    old = "PartitionSpec("
    return f"P({text[len(old):]}" if text.startswith(old) else text


# ------------------------------------------------------------------- refs --

#: ``jax.Ref`` (``jax.new_ref``) is ``core.Ref`` from JAX 0.7.2; 0.7.0 and 0.7.1
#: named it ``MutableArray`` / ``ArrayRef`` (untested: see docs/versions.md).
_REF_TYPE: Any = (getattr(_jax.core, "Ref", None) or getattr(_jax.core, "ArrayRef", None)
                  or getattr(_jax.core, "MutableArray", None))

def is_ref(x: Any) -> bool:
    """True for a ``jax.Ref`` (``jax.new_ref``) held at the top level, not a
    tracer of one."""
    return _REF_TYPE is not None and isinstance(x, _REF_TYPE) and not is_tracer(x)


def ref_array(x: Any) -> Any:
    """The ``jax.Array`` that holds a Ref's buffer now (``Ref._refs._buf``), for
    reading its state only; ``None`` for a Ref built of several arrays (a
    "high" Ref). JAX writes each call's new value into this same object
    (``_replace_with``), so it is never to be kept."""
    buf = getattr(getattr(x, "_refs", None), "_buf", None)
    return buf if isinstance(buf, jax.Array) else None


def ref_addresses(x: Any, left_behind: Callable[[Any], None]) -> tuple[int, ...] | None:
    """The device address of a Ref's buffer, one per addressable shard; ``None``
    where it cannot be read.

    JAX writes a call's new value into the Ref's array object itself
    (``ArrayImpl._replace_with``, 0.7 to 0.10), which swaps its per-device
    buffers but not the ``addressable_shards`` it cached, which then name the
    old, deleted ones. From 0.9 they are read through a twin of the array
    object (:func:`buffer_addresses`), which leaves nothing behind. Before, on one
    device the Ref's own ``unsafe_buffer_pointer()`` reads the current buffer
    (and, unlike ``addressable_data(0)``, leaves no per-device array object
    behind for ``jax.live_arrays()`` to count); on several, ``addressable_data(i)``.

    The caller checks first that the buffer (:func:`ref_array`) is there to read
    (:func:`memscope.capturing.observe.no_buffer`); ``left_behind`` is
    :func:`buffer_addresses`'.
    """
    buf = ref_array(x)
    if buf is None:
        return None
    try:
        if ARRAY_TWINS:  # the buffers the array object holds now, through a twin
            return buffer_addresses(buf, left_behind)
        count = len(buf.sharding.addressable_devices)
        if count == 1:
            return (int(x.unsafe_buffer_pointer()),)
        return tuple(int(buf.addressable_data(i).unsafe_buffer_pointer())
                     for i in range(count))
    except Exception:  # a backend without raw addresses
        return None


def is_ref_aval(aval: Any) -> bool:
    """True for the abstract value of a Ref (``jax.typeof(ref)``: ``Ref{f32[4]}``)."""
    return isinstance(aval, _jax.state_types.AbstractRef)


def ref_mutation(lowered: Any) -> tuple[tuple[int | None, ...], list[Any]] | None:
    """The lowering's ``MutationData`` (its compile arguments' ``mut``, 0.7 to
    0.10): per non-token result of ``main``, the non-token argument whose Ref it
    holds the new value of (``out_mut``), and the Refs the program closes over
    (``in_mut``); ``None`` when the program has no Ref argument."""
    mut = lowered._lowering.compile_args.get("mut")
    if mut is None:
        return None
    return tuple(mut.out_mut), list(mut.in_mut)


def closed_over_refs(lowered: Any) -> list[Any]:
    """The Refs a lowered program closes over, in the order JAX appended them to
    ``main``'s arguments. The caller reads them and lets go."""
    mutation = ref_mutation(lowered)
    return [] if mutation is None else mutation[1]


def ref_effects(closed_jaxpr: Any) -> Iterator[tuple[int, str]]:
    """Each read, write or accumulate effect JAX recorded on a traced program,
    as the position of its Ref in ``constvars + invars`` and ``"read"``,
    ``"written"`` or ``"updated"`` (also for uses inside ``scan``, ``cond`` and
    inner jits). JAX 0.7 to 0.9 name the Ref by its position (``input_index``);
    JAX 0.10 by its variable (``input``)."""
    jaxpr = closed_jaxpr.jaxpr
    variables = [*jaxpr.constvars, *jaxpr.invars]
    for effect in closed_jaxpr.effects:
        if not isinstance(effect, _jax.state_types.RefEffect):
            continue
        where = getattr(effect, "input", getattr(effect, "input_index", None))
        if not isinstance(where, int):
            where = next((i for i, v in enumerate(variables) if v is where), None)
        if where is None:
            continue
        yield where, ("read" if isinstance(effect, _jax.state_types.ReadEffect) else
                      "written" if isinstance(effect, _jax.state_types.WriteEffect) else
                      "updated")


# ------------------------------------------------------------------ hijax --
#
# A hijax value (``jax.experimental.hijax``: Flax's hijax ``Variable``) is one
# leaf to JAX's pytrees and to its tracing, and several arrays to its lowering:
# a traced jaxpr over one is ``is_high``, and lowering it first turns it into a
# jaxpr over the arrays of each hijax type (``lo_ty``; ``pe.lower_jaxpr``).
# JAX 0.7 to 0.10 also have mutable hijax types (with quasi-dynamic data,
# ``has_qdd``): each one the program takes, or closes over, adds results to
# ``main``, its arrays' new values, which JAX writes back into it after the
# call (``pjit._to_lojax``). JAX 0.11 has no mutable hijax type.


def _hijax_type(x: Any) -> Any:
    """JAX's type of ``x`` where it is a hijax type held at the top level, else
    ``None``. A hijax type is registered by its exact class
    (``hijax.register_hitype``), so no other value's type is asked for (asking
    may run its ``__jax_array__``)."""
    mappings = getattr(_jax.core, "pytype_aval_mappings", None)
    if isinstance(x, jax.Array) or mappings is None:
        return None
    typeof = mappings.get(type(x))
    if typeof is None:
        return None
    try:
        aval = typeof(x)
    except Exception:  # not a value JAX can trace: JAX says so at the call
        return None
    return aval if getattr(aval, "is_high", False) is True else None


def is_hijax(x: Any) -> bool:
    """True for a value of a hijax type (a Flax hijax ``Variable``), not a tracer of one."""
    return _hijax_type(x) is not None


def writes_back(x: Any) -> bool:
    """True for a value of a mutable hijax type (JAX 0.7 to 0.10): the program
    returns its arrays' new values, which JAX writes back into it."""
    aval = _hijax_type(x)
    return aval is not None and getattr(aval, "has_qdd", False) is True


def lo_values(x: Any) -> list[Any] | None:
    """The arrays a hijax value is to its compiled program, as JAX reads them at
    the call (``pjit._to_lojax``), in the order of ``main``'s arguments; ``None``
    for any other value. For a mutable one, its state now."""
    aval = _hijax_type(x)
    if aval is None:
        return None
    if getattr(aval, "has_qdd", False) is True:
        with_state = _jax.core.cur_aval_qdd(x)
        read = getattr(with_state, "read_loval_in", None) or with_state.read_loval  # (0.10, 0.7-0.9)
        return list(read(x))
    return list(aval.lower_val(x))


@dataclass(frozen=True)
class HighValue:
    """One value of a traced program over hijax types, as its lowering has it:
    the abstract value of each of its arrays (an array's: itself), and, for a
    hijax value, its type's own description (its aval, or its quasi-dynamic
    data), which names the arrays (:func:`memscope._frameworks.hijax_paths`)."""

    lo: tuple[Any, ...]
    high: bool = False
    described: Any = None
    #: the hijax type as JAX prints it, without its parentheses (``Param``)
    name: str = ""


def hijax_value(x: Any) -> HighValue | None:
    """A hijax value's :class:`HighValue` now (a mutable one's, in its state
    now); ``None`` for any other value."""
    aval = _hijax_type(x)
    if aval is None:
        return None
    if getattr(aval, "has_qdd", False) is True:
        return _high_value(_jax.core.cur_aval_qdd(x))
    return _high_value(aval)


@dataclass(frozen=True)
class HighLayout:
    """How JAX lowers a traced program over hijax values.

    ``consts`` are the values JAX hoisted out of the function (what it closes
    over), first among ``main``'s arguments; ``inputs`` and ``outputs`` the
    call's flat leaves. ``written_back`` holds, for each mutable hijax value the
    program takes, its index among ``[*consts, *inputs]`` and its new value: in
    this order they are the first of ``main``'s results.
    """

    consts: tuple[HighValue, ...]
    inputs: tuple[HighValue, ...]
    outputs: tuple[HighValue, ...]
    written_back: tuple[tuple[int, HighValue], ...]


def _high_value(aval: Any) -> HighValue:
    if not getattr(aval, "is_high", False):
        return HighValue((aval,))
    with_state = getattr(_jax.core, "AvalQDD", None)  # JAX 0.7 to 0.10: a type and its state
    qdd = aval.qdd if with_state is not None and isinstance(aval, with_state) else None
    kind = aval.aval if qdd is not None else aval
    try:
        name = str(kind.str_short())
    except Exception:  # a type that does not print itself
        name = type(kind).__name__
    return HighValue(tuple(aval.lo_ty()), high=True,
                     described=qdd if qdd is not None else kind,
                     name=name[:-2] if name.endswith("()") else name)


def high_layout(traced: Any) -> HighLayout | None:
    """How ``traced`` (a ``jax.stages.Traced``) lowers its hijax values;
    ``None`` for a program over arrays only."""
    jaxpr = traced.jaxpr
    if not getattr(jaxpr, "is_high", False):
        return None
    # JAX 0.7 to 0.10 pair each type with its state at entry and at exit.
    entry = getattr(jaxpr, "in_aval_qdds", None) or jaxpr.in_avals
    final = getattr(jaxpr, "final_aval_qdds", None) or ()
    n = traced._num_consts
    values = [_high_value(a) for a in entry]
    written = tuple((i, _high_value(a)) for i, a in enumerate(final)
                    if getattr(a, "has_qdd", False) is True)
    return HighLayout(consts=tuple(values[:n]), inputs=tuple(values[n:]),
                      outputs=tuple(_high_value(a) for a in jaxpr.out_avals),
                      written_back=written)


def hoisted_consts(traced: Any) -> list[Any]:
    """The values JAX hoisted out of a traced function (``HighLayout.consts``):
    for the caller to read and let go."""
    return list(getattr(traced, "_consts", ()))


def leaf_nbytes(shape: tuple[int, ...], dtype: Any) -> int:
    """Bytes of one array of ``shape`` and ``dtype``, counting extended dtypes
    (PRNG keys) by their physical representation."""
    physical = _jax.core.physical_aval(_jax.core.ShapedArray(shape, dtype))
    return int(np.prod(physical.shape, dtype=np.int64)) * np.dtype(physical.dtype).itemsize



def sharding_key(sharding: Any, ndim: int) -> Any:
    """A hashable key equal for shardings JAX treats as the same placement.

    ``NamedSharding(mesh, P())`` and ``NamedSharding(mesh, P(None))`` differ as
    objects but are one placement: JAX compiles one executable for both. This is
    what ``Sharding.is_equivalent_to`` compares (the HLO sharding, the device
    list and the memory kind), as one key.
    """
    try:
        return (sharding._to_xla_hlo_sharding(ndim), sharding._internal_device_list,
                sharding.memory_kind)
    except Exception:  # a sharding kind without these: its own equality
        return sharding


# --- address reads that leave arrays behind ---------------------------------------------

#: Reading a buffer's address through the array itself (``unsafe_buffer_pointer()``,
#: ``addressable_shards`` or ``addressable_data`` on every series, ``_arrays`` on a
#: sharded array) makes it cache a Python array per device, which
#: ``jax.live_arrays()`` then lists beside it, for as long as the array lives: the
#: program would see more live arrays than under python. memscope reads through a
#: twin, a second array object over the same device buffers, and the per-device
#: arrays go with it. JAX 0.9 brought ``ArrayImpl._rewrap_with_aval_and_sharding``
#: for the twin; on 0.7 and 0.8 jaxlib's ``reorder_shards`` onto the array's own
#: sharding, reusing its buffers, makes one (checked by running: the addresses are
#: the array's, and no array is left once the twin goes).
ARRAY_TWINS: bool = _JAX_SERIES >= (0, 9)


def _address_twin(x: Any) -> Any:
    """A second array object over ``x``'s device buffers (see :data:`ARRAY_TWINS`)."""
    if ARRAY_TWINS:
        return x._rewrap_with_aval_and_sharding(x.aval, x.sharding)
    return _jax.xla_client.reorder_shards(  # 0.7, 0.8
        x, x.sharding, _jax.xla_client.ArrayCopySemantics.REUSE_INPUT)


def buffer_addresses(x: Any, left_behind: Callable[[Any], None]) -> tuple[int, ...]:
    """The device address of each addressable shard's buffer of the ``jax.Array``
    ``x``, in ``addressable_shards`` order, as integers; ``x`` keeps no per-device
    array from the read (read through a twin, :data:`ARRAY_TWINS`). Where no twin
    can be made (an array jaxlib will not reorder), the read goes through ``x``,
    which keeps its per-device arrays (:func:`address_views`), and
    ``left_behind(x)`` is called after it.

    Raises what the backend raises where it gives no raw addresses.
    """
    try:
        twin = _address_twin(x)
    except Exception:  # no twin of this array: read through it, and note what it keeps
        twin = None
    if twin is not None and twin is not x:
        try:
            return tuple(int(a.unsafe_buffer_pointer()) for a in twin._arrays)
        finally:
            del twin
    try:
        return tuple(int(shard.data.unsafe_buffer_pointer()) for shard in x.addressable_shards)
    finally:
        left_behind(x)


def address_views(x: Any) -> list[Any]:
    """The per-device arrays an address read through ``x`` left on it (its
    private ``_arrays``), ``x`` itself left out; none for a value without them."""
    try:
        views = list(x._arrays or ())
    except Exception:  # not an array with per-device arrays
        return []
    return [view for view in views if view is not x]
