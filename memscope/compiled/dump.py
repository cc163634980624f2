"""XLA's own dump of a compile: the optimized module with its buffer assignment.

Where ``memory_analysis()`` carries no buffer assignment, the compiler still
writes one beside the optimized module when asked to dump it as a proto
(``xla_dump_hlo_as_proto``: ``*after_optimizations.hlo.pb``, an ``HloProto``
holding both). XLA:TPU's ``memory_analysis()`` has none; neither has XLA:GPU's
PJRT plugin, nor its serialized executable (seen on an H200 with JAX 0.11.2;
the dump held the assignment there). Reading it costs one more compile of the
same lowering, made where the compiled programs are read (memscope's worker).
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from memscope.compiled._hlo_schema import message_class
from memscope.compiled.raw import compile_uncached

HloProto = message_class("HloProto")


@dataclass(frozen=True)
class Built:
    """One compile: the executable and, from XLA's dump of it, its optimized
    module and buffer assignment, serialized (``None`` where not dumped)."""

    compiled: Any
    module: bytes | None
    assignment: bytes | None
    #: XLA options the compile was made with beyond those asked for (a
    #: target's retry with another option: :mod:`memscope.compiled.targets.gpu`)
    options: dict[str, Any] = field(default_factory=dict)


def compile_dumped(lowered: Any, options: dict[str, Any] | None = None, *,
                   device_memory_size: int | None = None) -> Built:
    """Compile ``lowered`` (with XLA debug ``options`` too, and the device memory
    XLA compiles for where given: :func:`memscope.compiled.raw.compile_uncached`),
    keeping what XLA dumps of the optimized module and its buffer assignment.
    (The dump's folder, new each time, also keeps JAX's in-memory cache from
    answering one compile with another's.)"""
    with tempfile.TemporaryDirectory(prefix="memscope-dump-") as folder:
        compiled = compile_uncached(lowered, {
            **(options or {}), "xla_dump_to": folder, "xla_dump_hlo_as_proto": True},
            device_memory_size=device_memory_size)
        found = sorted(Path(folder).glob("*after_optimizations.hlo.pb"))
        data = found[0].read_bytes() if found else None
    if data is None:
        return Built(compiled, None, None)
    proto = HloProto()
    proto.ParseFromString(data)
    return Built(compiled, bytes(proto.hlo_module) or None,
                 bytes(proto.buffer_assignment) or None)
