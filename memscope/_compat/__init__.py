"""Every JAX-version difference and every private JAX attribute memscope uses.

Nothing outside this package touches ``jax._src``: the private modules are
imported through :func:`memscope._compat._jax._private`, so memscope imports on
any JAX, and what a newer JAX moved raises :class:`JaxInternalMissing` where it
is used. Each function says why it needs what it reaches for, and each version
difference is named by the version that brought it, so that a JAX upgrade is a
review of this package (docs/versions.md lists them by series). The version
rules that need no JAX live apart, in ``memscope._versions`` (read before the
program imports JAX). What capturing needs on the program's own path is
checked once, before anything runs (:func:`capture_problem`); the rest is read
off the program's path, where a failure is that function's ``error`` in the
report.

One module per concern, read as ``_compat.<module>.<name>``; the installed
versions and their flags (:mod:`~memscope._compat._jax`) are re-exported here:

- :mod:`~memscope._compat._jax`: the versions, their flags, the private modules;
- :mod:`~memscope._compat.hooks`: the jit hook, tracing state, settings, the
  reverse-mode hook: what capturing reads on the program's path;
- :mod:`~memscope._compat.values`: tracers, buffers, addresses, Refs, hijax values;
- :mod:`~memscope._compat.stages`: traced and lowered programs beyond the stages API;
- :mod:`~memscope._compat.executables`: what a compiled executable holds;
- :mod:`~memscope._compat.targets`: compiler plugins and retargeted lowerings.

A test that stands in for another JAX patches the name where it is read: a
function on its module (``monkeypatch.setattr(_compat.stages, "parameter_layout", ...)``),
a private module on :mod:`~memscope._compat._jax` (``_jax.ir``).
"""

from __future__ import annotations

from memscope._compat import _jax, executables, hooks, stages, targets, values
from memscope._compat._jax import (
    ALLOW_UNSUPPORTED_ENV,
    CPU_RUNS_HOST_MEMORY_KINDS,
    GPU_ALLOCATOR_ADDRESS,
    GPU_ALLOCATOR_VMM,
    GPU_ALLOCATORS,
    JAX_PACKAGES,
    JAX_VERSION,
    JAXLIB_VERSION,
    JAXPR_HOLDS_CONSTS,
    PMAP_THROUGH_JIT_DEFAULT,
    REPORT_TO,
    SAME_SIZE_DONORS,
    SUPPORTED_SERIES,
    JaxInternalMissing,
    newer_than_verified,
    series,
    support_problem,
    unsupported_allowed,
    unverified_line,
    unverified_note,
)

__all__ = [  # the modules, and the versions' facts from _jax
    "ALLOW_UNSUPPORTED_ENV",
    "CPU_RUNS_HOST_MEMORY_KINDS",
    "GPU_ALLOCATORS",
    "GPU_ALLOCATOR_ADDRESS",
    "GPU_ALLOCATOR_VMM",
    "JAXLIB_VERSION",
    "JAXPR_HOLDS_CONSTS",
    "JAX_PACKAGES",
    "JAX_VERSION",
    "PMAP_THROUGH_JIT_DEFAULT",
    "REPORT_TO",
    "SAME_SIZE_DONORS",
    "SUPPORTED_SERIES",
    "JaxInternalMissing",
    "_jax",
    "executables",
    "hooks",
    "newer_than_verified",
    "series",
    "stages",
    "support_problem",
    "targets",
    "unsupported_allowed",
    "unverified_line",
    "unverified_note",
    "values",
]
