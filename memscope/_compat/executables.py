"""What memscope reads of a compiled executable: its identity, its optimized
modules, its serialized form (where XLA:GPU's plugin keeps the buffer
assignment), ``memory_analysis()``'s assignment and peak, and its FLOPs.
"""

from __future__ import annotations

from typing import Any


def executable_fingerprint(compiled: Any) -> bytes | str | None:
    """The XLA executable's fingerprint (``PjRtLoadedExecutable.fingerprint``):
    equal for the same program compiled alike, whichever jit object compiled it;
    ``None`` where the backend gives none. A few microseconds."""
    try:
        value = compiled.runtime_executable().fingerprint
    except Exception:
        return None
    return value if isinstance(value, bytes | str) and value else None


def executable_id(compiled: Any) -> int | None:
    """The ``id`` of the XLA executable JAX runs for ``compiled``; ``None`` where
    it cannot be read.

    JAX serves some new signatures of a jit object with an executable it
    already has (a NumPy array where a ``jax.Array`` was, for one: a new entry
    of its dispatch cache, but no trace, lowering or compile): then this is the
    same as that signature's (beside :func:`executable_fingerprint`, which
    guards it against an executable freed and another made at its address)."""
    try:
        return id(compiled.runtime_executable())
    except Exception:
        return None


def optimized_hlo_module_protos(compiled: Any) -> list[bytes]:
    """Serialized ``HloModuleProto`` of each module of the executable JAX runs."""
    return [m.as_serialized_hlo_module_proto()
            for m in compiled.runtime_executable().hlo_modules()]


def serialized_executable_payloads(compiled: Any) -> tuple[bytes, ...]:
    """The executable JAX runs, serialized, as candidates for PJRT's
    ``ExecutableAndOptionsProto``: the bytes of ``LoadedExecutable.serialize()``
    (what JAX's persistent compilation cache stores), and those bytes after
    their first length-prefixed message, the header IFRT's serialization puts
    before the executable from jaxlib 0.9 (0.7 and 0.8 have none). ``()`` where the executable does not serialize (a
    backend that cannot export it, or host callbacks).

    Read only where ``memory_analysis()`` carries no buffer assignment: XLA:GPU's
    PJRT plugin (the C API) passes the sizes but not the assignment.
    """
    try:
        executable = compiled.runtime_executable()
        if hasattr(executable, "serialize"):
            data = bytes(executable.serialize())
        else:  # jaxlib 0.7: through the client, with no header
            data = bytes(executable.client.serialize_executable(executable))
    except Exception:  # any backend's refusal means "not available"
        return ()
    length, start = 0, 0
    for shift in range(0, 64, 7):  # the header's length, a protobuf varint
        if start >= len(data):
            return (data,)
        byte = data[start]
        start += 1
        length |= (byte & 0x7F) << shift
        if byte < 0x80:
            break
    return (data, data[start + length:]) if start + length < len(data) else (data,)


def buffer_assignment_bytes(stats: Any) -> bytes | None:
    """The serialized ``BufferAssignmentProto`` that ``memory_analysis()`` carries.

    The jaxlib series memscope supports exposes it as
    ``serialized_buffer_assignment_proto``; a jaxlib without that attribute (or
    a backend that leaves it empty) gives ``None``: the breakdown is unknown.
    """
    data = getattr(stats, "serialized_buffer_assignment_proto", None)
    return bytes(data) if data else None


def peak_memory_bytes(stats: Any) -> int | None:
    """XLA's own peak, where this jaxlib reports one (every supported jaxlib
    does; jaxlib 0.6 and older do not, and a backend may leave it out)."""
    peak = getattr(stats, "peak_memory_in_bytes", None)
    return None if peak is None else int(peak)


def flops(compiled: Any) -> float | None:
    """The ``flops`` of XLA's ``cost_analysis()``; ``None`` where it gives none.

    jaxlib returns one dict (0.4.30 and later) or a list of one dict per
    module (older); a backend may raise ``NotImplementedError``.
    """
    try:
        cost = compiled.cost_analysis()
    except Exception:
        return None
    if isinstance(cost, list | tuple):
        cost = cost[0] if cost else None
    value = cost.get("flops") if isinstance(cost, dict) else None
    return None if value is None else float(value)
