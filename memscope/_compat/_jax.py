"""The ground the rest of :mod:`memscope._compat` stands on: the installed JAX's
and jaxlib's versions, the flags each version difference is read by (each named
by the version that brought it), and the private JAX modules, imported through
:func:`_private` so that memscope imports on any JAX.

A private module that a newer JAX moved is a :class:`_Missing` stand-in here:
reading an attribute of it raises :class:`JaxInternalMissing` where it is used.
"""

from __future__ import annotations

import importlib
from typing import Any

import jax
import jaxlib

JAX_VERSION: str = jax.__version__
JAXLIB_VERSION: str = getattr(jaxlib, "__version__", None) or jaxlib.version.__version__

#: Packages whose own jitted helpers are JAX internals, not the user's functions.
JAX_PACKAGES = ("jax", "jaxlib")


# --------------------------------------------------------------- versions --

# The version rules live in memscope._versions (read before JAX is imported).
from memscope._versions import (  # noqa: E402, I001  (re-exported)
    ALLOW_UNSUPPORTED_ENV as ALLOW_UNSUPPORTED_ENV,
    REPORT_TO as REPORT_TO,
    SUPPORTED_SERIES as SUPPORTED_SERIES,
    newer_than_verified as newer_than_verified,
    series as series,
    support_problem as support_problem,
    unsupported_allowed as unsupported_allowed,
    unverified_line as unverified_line,
    unverified_note as unverified_note,
)


_JAX_SERIES = series(JAX_VERSION) or (0, 0)

#: JAX 0.8 added a second pass to ``mlir._set_up_aliases``: a donated argument
#: left unmatched is offered to XLA as a buffer donor when an unmatched output
#: has its element count. On 0.7 such an argument is "not usable".
SAME_SIZE_DONORS: bool = _JAX_SERIES >= (0, 8)
#: jaxlib 0.10 runs programs with host memory kinds (``pinned_host`` arguments
#: and outputs) on XLA:CPU; 0.7 to 0.9 compile them but fail at the call ("No
#: registered implementation for ... annotate_device_placement for Host").
CPU_RUNS_HOST_MEMORY_KINDS: bool = _JAX_SERIES >= (0, 10)
#: JAX 0.8 made ``Traced(meta_tys_flat, params, in_tree, out_tree, consts)``; 0.7
#: has ``Traced(lfg, params, in_tree, out_tree, num_consts)``.
_TRACED_META_TYS: bool = _JAX_SERIES >= (0, 8)
#: From JAX 0.8, ``jax.pmap`` is a ``jax.jit`` of ``shard_map`` (``jax_pmap_shmap_merge``
#: on by default; JAX 0.10 removed the flag); on 0.7 it compiles outside
#: ``jax.jit`` unless that flag is set.
PMAP_THROUGH_JIT_DEFAULT: bool = _JAX_SERIES >= (0, 8)
#: JAX 0.11 merged ``ClosedJaxpr`` into ``Jaxpr``: a jaxpr carries its constants
#: (``consts``), ``with_consts`` copies it, ``.jaxpr`` is the jaxpr itself and
#: ``ClosedJaxpr`` is an alias kept for old callers (read, not run:
#: docs/versions.md).
JAXPR_HOLDS_CONSTS: bool = _JAX_SERIES >= (0, 11)

_JAXLIB_SERIES = series(JAXLIB_VERSION) or (0, 0)

# JAX's allocator settings on a GPU, as jaxlib's ``generate_pjrt_gpu_plugin_options``
# (jaxlib/xla_client.py) reads them for the CUDA plugin. Read alike in jaxlib 0.7 to
# 0.12 (the 0.7.2, 0.8.0 to 0.8.3, 0.9.0 to 0.9.2, 0.10.2, 0.11.0, 0.11.2 and 0.12.0.1
# wheels compared): ``XLA_CLIENT_MEM_FRACTION``, else the older
# ``XLA_PYTHON_CLIENT_MEM_FRACTION`` (both set: ValueError), as ``float()``, unset
# where empty; ``XLA_PYTHON_CLIENT_PREALLOCATE`` off for "false", "False" or "0";
# ``XLA_PYTHON_CLIENT_ALLOCATOR`` lower-cased, one of the names below (else
# ValueError), which is all that differs between series.
#: jaxlib 0.10 accepts ``XLA_PYTHON_CLIENT_ALLOCATOR=vmm`` (XLA's VMM allocator).
GPU_ALLOCATOR_VMM: bool = _JAXLIB_SERIES >= (0, 10)
#: jaxlib 0.11 accepts ``XLA_PYTHON_CLIENT_ALLOCATOR=address``.
GPU_ALLOCATOR_ADDRESS: bool = _JAXLIB_SERIES >= (0, 11)
#: The ``XLA_PYTHON_CLIENT_ALLOCATOR`` values the installed jaxlib accepts.
GPU_ALLOCATORS: tuple[str, ...] = ("default", "platform", "bfc", "cuda_async",
                                   *(("vmm",) if GPU_ALLOCATOR_VMM else ()),
                                   *(("address",) if GPU_ALLOCATOR_ADDRESS else ()))


# ------------------------------------------------------ private modules --


class JaxInternalMissing(AttributeError):
    """A private JAX module or attribute memscope reads is not in the installed
    JAX. An ``AttributeError``, so ``getattr(module, name, default)`` still
    gives the default."""


class _Missing:
    """Stands in for a private JAX module that did not import: any attribute
    read says which, and on which JAX."""

    def __init__(self, name: str, error: BaseException) -> None:
        self._name = name
        self._error = f"{type(error).__name__}: {error}"

    def __getattr__(self, attr: str) -> Any:
        if attr.startswith("__"):  # copy, pickle and friends probing for hooks
            raise AttributeError(attr)
        raise JaxInternalMissing(f"memscope cannot read {self._name}.{attr} on JAX "
                                 f"{JAX_VERSION}: {self._name} did not import ({self._error})")


def _private(package: str, name: str) -> Any:
    """``from package import name`` for a private JAX module, or a :class:`_Missing`
    stand-in where this JAX has moved it."""
    try:
        module = importlib.import_module(package)
        found = getattr(module, name, None)
        return found if found is not None else importlib.import_module(f"{package}.{name}")
    except Exception as e:
        return _Missing(f"{package}.{name}", e)


config: Any = _private("jax._src", "config")
core: Any = _private("jax._src", "core")
linear_util: Any = _private("jax._src", "linear_util")
pjit: Any = _private("jax._src", "pjit")
xla_bridge: Any = _private("jax._src", "xla_bridge")
mlir: Any = _private("jax._src.interpreters", "mlir")
pxla: Any = _private("jax._src.interpreters", "pxla")
pe: Any = _private("jax._src.interpreters", "partial_eval")
ir: Any = _private("jax._src.lib.mlir", "ir")
xla_client: Any = _private("jax._src.lib", "xla_client")
compiler: Any = _private("jax._src", "compiler")
state_types: Any = _private("jax._src.state", "types")
ad_checkpoint: Any = _private("jax._src", "ad_checkpoint")
api: Any = _private("jax._src", "api")
