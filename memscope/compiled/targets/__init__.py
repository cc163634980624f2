"""Where the captured programs are compiled: this machine
(:mod:`~memscope.compiled.targets.here`), or an accelerator it lacks,
``--target tpu:GENERATION:TOPOLOGY`` (libtpu's compiler) and ``--target
gpu:MODEL[:N]`` (the CUDA plugin's), through JAX's topology API.

One family (:class:`~memscope.compiled.targets.base.Target`): each lowers the
program traced here for its devices, compiles it with its buffer assignment at
hand and reads it. Each accelerator kind adds its compile-only devices, its
device facts and their source, its peak rule and the budget a program has on
each device: :mod:`~memscope.compiled.targets.tpu`,
:mod:`~memscope.compiled.targets.gpu`; each has ``parse_spec`` (the form, to
a spec), ``open_target`` (the spec, with this process's JAX set up to run the
program on the CPU) and ``make_target`` (the spec, JAX left as it is).
"""

from __future__ import annotations

from typing import Any

from memscope.compiled.targets.base import Target, TargetMismatch, TargetSetupError

__all__ = ["Target", "TargetMismatch", "TargetSetupError", "compile_only_target",
           "open_target", "parse_spec"]

FORMS = "tpu:GENERATION:TOPOLOGY (e.g. tpu:v5p:2x2x1) or gpu:MODEL[:N] (e.g. gpu:h100:8)"


def _kind(text: str) -> Any:
    """The module of the kind ``text`` names (``tpu:``, ``gpu:``).

    Raises:
        TargetSetupError: neither.
    """
    kind = text.strip().lower().partition(":")[0]
    if kind == "tpu":
        from memscope.compiled.targets import tpu

        return tpu
    if kind == "gpu":
        from memscope.compiled.targets import gpu

        return gpu
    raise TargetSetupError(f"unknown target {text!r}: give {FORMS}")


def parse_spec(text: str) -> Any:
    """The target ``text`` names, parsed (nothing is started).

    Raises:
        TargetSetupError: not a form of either kind, or a generation, model or
            topology memscope does not know.
    """
    return _kind(text).parse_spec(text)


def open_target(text: str) -> Target:
    """The target ``text`` names: its compile-only devices, from its compiler,
    with this process's JAX set up (before it starts) to run the program on
    the CPU with as many devices.

    Raises:
        TargetSetupError: an unknown form; its compiler is not installed, or
            does not know the target; JAX started already.
    """
    kind = _kind(text)
    return kind.open_target(kind.parse_spec(text))


def compile_only_target(text: str) -> Target:
    """The target ``text`` names, for compiling programs traced with
    ``jax.ShapeDtypeStruct``'s over its devices (``memscope.analyze``): its
    compile-only devices, with this process's JAX left as it is (started or
    not, on whatever devices it has).

    Raises:
        TargetSetupError: an unknown form, or its compiler is not installed.
    """
    kind = _kind(text)
    return kind.make_target(kind.parse_spec(text))
