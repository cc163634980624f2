"""The private reads behind ``--target`` (:mod:`memscope.compiled.targets`):
loading a compiler's PJRT plugin by path, and setting a lowering to compile
for another machine's devices.
"""

from __future__ import annotations

import copy
from typing import Any

from memscope._compat import _jax

# --------------------------------------------------------------- targets --
# ``memscope --target tpu:TOPOLOGY`` / ``gpu:MODEL`` compiles each captured
# program for an accelerator this machine lacks (libtpu's compiler, or the CUDA
# plugin's, through JAX's topology API); nothing of it runs. See
# memscope.compiled.targets.


def pjrt_plugin_loaded(platform: str) -> bool:
    """Whether this process has loaded the PJRT plugin of ``platform`` (``tpu``,
    ``cuda``): JAX did, finding it installed, or :func:`load_cuda_plugin` /
    :func:`load_tpu_plugin` did. Private: ``xla_client.pjrt_plugin_loaded``
    (jaxlib 0.7 to 0.12)."""
    try:
        return bool(_jax.xla_client.pjrt_plugin_loaded(platform))
    except Exception:
        return False


def load_cuda_plugin(library: str) -> None:
    """Register JAX's CUDA PJRT plugin, the compiler in ``library`` (its
    ``xla_cuda_plugin.so``), as the platform ``cuda``, as the plugin's own
    ``jax_plugins.xla_cuda13.initialize`` does when JAX finds it installed, but
    by path, without its checks of the CUDA libraries a GPU needs, and for this
    process only: its topologies (compile-only devices) then come from it. A
    backend JAX has already started keeps its platforms. Private:
    ``xla_bridge.register_plugin``, ``xla_client.generate_pjrt_gpu_plugin_options``
    (JAX 0.7 to 0.12)."""
    _jax.xla_bridge.register_plugin("cuda", priority=500, library_path=library,
                                options=_jax.xla_client.generate_pjrt_gpu_plugin_options())


def load_tpu_plugin(library: str) -> None:
    """Load libtpu from ``library`` (its ``libtpu.so``) as the platform ``tpu``,
    where JAX's TPU topologies look for it (``make_pjrt_tpu_topology``: a plugin
    loaded already is used). Private: ``xla_client.load_pjrt_plugin_dynamically``
    (jaxlib 0.7 to 0.12)."""
    _jax.xla_client.load_pjrt_plugin_dynamically("tpu", library)


def mesh_compile_args(lowered: Any) -> dict[str, Any]:
    """What JAX compiles ``lowered`` (a ``jax.stages.Lowered``) with: its backend,
    shardings and context mesh. Private: ``Lowered._lowering`` is JAX's
    ``MeshComputation``, whose ``compile`` reads them from ``compile_args``
    (``jax/_src/interpreters/pxla.py``, JAX 0.7 to 0.10).

    Raises:
        TypeError: the lowering is not a ``MeshComputation``.
    """
    lowering = lowered._lowering
    if not isinstance(lowering, _jax.pxla.MeshComputation):
        raise TypeError(f"cannot retarget a {type(lowering).__name__} lowering")
    args: dict[str, Any] = lowering.compile_args
    return args


def device_assignment(lowered: Any) -> tuple[Any, ...] | None:
    """The devices ``lowered`` compiles for, in the order its shardings name them
    (``MeshComputation._device_list``, JAX 0.7 to 0.10); ``None`` where it names none."""
    assignment = lowered._lowering._device_list
    return None if assignment is None else tuple(assignment)


def with_compile_args(lowered: Any, args: dict[str, Any],
                      devices: tuple[Any, ...] | None) -> Any:
    """``lowered`` set to compile with other ``args`` (:func:`mesh_compile_args`)
    for other ``devices`` (:func:`device_assignment`), as a lowering of its own
    with no executable yet (``MeshComputation._executable``)."""
    there = copy.copy(lowered._lowering)
    there.compile_args = args
    there._device_list = None if devices is None else _jax.pxla._create_device_list(devices)
    there._executable = None
    out = copy.copy(lowered)
    out._lowering = there
    return out


def is_unspecified_sharding(s: Any) -> bool:
    """JAX's placeholders for a sharding left to XLA (``UNSPECIFIED``, ``AUTO``)."""
    return s is None or type(s).__name__ in ("UnspecifiedValue", "AUTO")
