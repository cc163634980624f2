"""The raw compile: a lowering compiled with XLA's options (and the device
memory XLA compiles for), nothing of it stored on the lowering.

Every compile memscope only reads goes through it, under
:func:`memscope.compiled.compile.compile_to_read`.
"""

from __future__ import annotations

import contextlib
import functools
import threading
from collections.abc import Callable, Iterator
from typing import Any

from memscope import _compat


def compile_uncached(lowered: Any, options: dict[str, Any] | None = None, *,
                     device_memory_size: int | None = None) -> Any:
    """Compile ``lowered`` without storing the executable on the lowering.

    ``Lowered.compile()`` keeps the executable on the lowering object; with
    explicit compiler options (empty by default) it does not. With
    :func:`memscope._compat.stages.with_donation`'s own
    jaxpr, nothing else keeps it either (see there).
    ``options`` are XLA's debug options (e.g.
    :data:`memscope.compiled.targets.here.UNTUNED_GPU`).

    ``device_memory_size``: the device memory XLA compiles for, in its build
    options (``ExecutableBuildOptions.device_memory_size``), as jaxlib sets it
    to the allocator's limit when it compiles for a device it holds
    (``PyClient::CompileAndLoadIfrtProgram``, jaxlib 0.7 to 0.12) and leaves it
    unset for compile-only devices; XLA:GPU's scheduler and rematerialization
    then take 80% of the device description's memory instead. JAX's Python
    API cannot set it: it is added to the serialized compile options JAX hands
    its compile (:func:`_with_device_memory`). JAX's in-memory cache of
    compiles keys on ``options``, not on it: a caller compiling one lowering
    under two sizes gives options that differ (memscope's dump folder does).
    """
    if device_memory_size is None:
        return lowered.compile(compiler_options=dict(options or {}))
    edit = functools.partial(_with_device_memory, size=device_memory_size)
    with compile_options_edited(edit):
        return lowered.compile(compiler_options=dict(options or {}))


@contextlib.contextmanager
def compile_options_edited(edit: Callable[[Any], Any]) -> Iterator[None]:
    """Within the block, each compile this thread makes takes JAX's compile options
    (an ``xla_client.CompileOptions``) as ``edit`` returns them
    (:func:`memscope._compat.stages.edit_compile_options`); other threads' compiles
    (the user's program's) are left as they are."""
    _compat.stages.edit_compile_options(_this_threads_edit)
    previous = getattr(_compile_edit, "edit", None)
    _compile_edit.edit = edit
    try:
        yield
    finally:
        _compile_edit.edit = previous


#: this thread's edit of its compiles' options (:func:`compile_options_edited`)
_compile_edit = threading.local()


def _this_threads_edit() -> Callable[[Any], Any] | None:
    return getattr(_compile_edit, "edit", None)


def _with_device_memory(options: Any, size: int) -> Any:
    """``options`` (an ``xla_client.CompileOptions``) with its build options'
    ``device_memory_size`` set: protobuf merges a message serialized after
    another into it, so the field is appended to the serialized options
    (``CompileOptionsProto.executable_build_options``, field 3, holding
    ``ExecutableBuildOptionsProto.device_memory_size``, field 15:
    xla/pjrt/proto/compile_options.proto) and the whole parsed back."""
    build = b"\x78" + _varint(size)  # field 15, varint
    extra = b"\x1a" + _varint(len(build)) + build  # field 3, length-delimited
    return type(options).ParseFromString(options.SerializeAsString() + extra)


def _varint(value: int) -> bytes:
    """``value`` (not negative) as a protobuf varint."""
    out = bytearray()
    while True:
        low, value = value & 0x7F, value >> 7
        out.append(low | (0x80 if value else 0))
        if not value:
            return bytes(out)
