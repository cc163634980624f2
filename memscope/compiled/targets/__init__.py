"""Compiling the captured programs for an accelerator this machine lacks:
``--target tpu:GENERATION:TOPOLOGY`` (libtpu's compiler) and ``--target
gpu:MODEL[:N]`` (the CUDA plugin's), through JAX's topology API.

One family (:mod:`~memscope.compiled.targets.base`): compile-only devices of
the target, the program traced here carried over to them, compiled with XLA's
dump of its buffer assignment and read like a program compiled here. Each
kind adds its devices, its device facts and their source, its peak rule and
the budget a program has on each device: :mod:`~memscope.compiled.targets.tpu`,
:mod:`~memscope.compiled.targets.gpu`.
"""

from __future__ import annotations

from typing import Any

from memscope.compiled.targets.base import Accelerator, TargetMismatch, TargetSetupError

__all__ = ["Accelerator", "TargetMismatch", "TargetSetupError", "compile_only_target",
           "open_target", "parse_target"]

FORMS = "tpu:GENERATION:TOPOLOGY (e.g. tpu:v5p:2x2x1) or gpu:MODEL[:N] (e.g. gpu:h100:8)"


def parse_target(text: str) -> Any:
    """The target ``text`` names, parsed (nothing is started).

    Raises:
        TargetSetupError: not a form of either kind, or a generation, model or
            topology memscope does not know.
    """
    kind = text.strip().lower().partition(":")[0]
    if kind == "tpu":
        from memscope.compiled.targets.tpu import parse_target as parse_tpu

        return parse_tpu(text)
    if kind == "gpu":
        from memscope.compiled.targets.gpu import parse_gpu

        return parse_gpu(text)
    raise TargetSetupError(f"unknown target {text!r}: give {FORMS}")


def open_target(spec: Any) -> Accelerator:
    """The target's compile-only devices, from its compiler (before JAX starts).

    Raises:
        TargetSetupError: its compiler is not installed, or does not know the target.
    """
    from memscope.compiled.targets.gpu import GpuSpec, open_gpu
    from memscope.compiled.targets.tpu import open_target as open_tpu

    return open_gpu(spec) if isinstance(spec, GpuSpec) else open_tpu(spec)


def compile_only_target(text: str) -> Accelerator:
    """The target ``text`` names, for compiling programs traced with
    ``jax.ShapeDtypeStruct``'s over its devices (``memscope.analyze``): its
    compile-only devices, with this process's JAX left as it is (started or
    not, on whatever devices it has).

    Raises:
        TargetSetupError: an unknown form, or its compiler is not installed.
    """
    from memscope.compiled.targets.gpu import GpuSpec, gpu_devices
    from memscope.compiled.targets.tpu import tpu_devices

    spec = parse_target(text)
    return gpu_devices(spec) if isinstance(spec, GpuSpec) else tpu_devices(spec)
