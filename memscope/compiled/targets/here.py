"""This machine as a target: the programs run here, on JAX's own devices, and
memscope compiles what it only reads (donation variants, checkpoint policies,
``fit``'s sizes) for the same devices, as cheaply as its figures allow."""

from __future__ import annotations

from typing import Any

import jax

from memscope import _compat
from memscope.compiled.cache import Kept
from memscope.compiled.dump import Built, compile_dumped
from memscope.compiled.raw import compile_uncached
from memscope.compiled.read import compiled_memory
from memscope.compiled.targets.base import Target, pieces
from memscope.report import Memory, TargetInfo

#: XLA:GPU's autotuner off. It runs candidate kernels for each fusion and GEMM
#: on the device while compiling; at a size that does not fit the device it
#: fails the compile ("RESOURCE_EXHAUSTED: Failed to get configs"), and each
#: compile it tunes takes seconds. ``memscope fit`` compiles sizes that need not
#: fit, so it compiles them without it (on an H200, JAX 0.11.2, the transformer
#: step's memory_analysis() was the same with the autotuner on and off).
UNTUNED_GPU: dict[str, Any] = {"xla_gpu_autotune_level": 0}

#: XLA:CPU's code generation without LLVM's optimizations. Every figure memscope
#: reads (``memory_analysis()``, the buffer assignment, ``cost_analysis()``) is
#: decided on the optimized HLO, before code is generated; optimizing the
#: generated code is most of an XLA:CPU compile (DP-SGD's step: 2.5 s -> 1.0 s)
#: and changes none of them (tests/test_compiled.py holds them byte for byte).
UNOPTIMIZED_CPU_CODE: dict[str, Any] = {"xla_backend_optimization_level": 0}


class HereTarget(Target):
    """This machine's devices, as JAX has them: the programs' own."""

    runs_here = True

    def __init__(self, *, dump: bool = False) -> None:
        """``dump``: every compile made with XLA's dump, wherever
        ``memory_analysis()`` carries the assignment too."""
        super().__init__("this machine", {})
        self.dump = dump

    @property
    def platform(self) -> str:  # type: ignore[override]
        return jax.default_backend()

    @property
    def devices(self) -> dict[int, Any]:
        return {d.id: d for d in jax.devices()}

    def _identity(self) -> str:
        # (the key names the backend and its devices already)
        return "dumped" if self.dump else ""

    def info(self) -> TargetInfo | None:
        return None

    @property
    def budget_bytes(self) -> int | None:
        return None  # (the devices' own limits: memory_stats())

    def options(self, lowered: Any, *, sizes: bool = False) -> dict[str, Any]:
        """On XLA:CPU without optimizing the generated code
        (:data:`UNOPTIMIZED_CPU_CODE`); ``fit``'s sizes on XLA:GPU without the
        autotuner (:data:`UNTUNED_GPU`)."""
        backend = jax.default_backend()
        options = dict(UNOPTIMIZED_CPU_CODE) if backend == "cpu" else {}
        if sizes and backend == "gpu":
            options.update(UNTUNED_GPU)
        return options

    def sharding(self, s: Any) -> Any:
        return s

    def lower(self, traced: Any) -> Any:
        return _compat.stages.lower(traced)

    def _compile(self, lowered: Any, options: dict[str, Any] | None) -> Built:
        """Where ``memory_analysis()`` carries the buffer assignment (XLA:CPU), the
        compile alone; elsewhere (XLA:GPU) made with XLA's dump, which holds it.
        Not kept in JAX's caches either way."""
        if not self.dump and assignment_in_memory_analysis(lowered):
            return Built(compile_uncached(lowered, options), None, None)
        return compile_dumped(lowered, options)

    def memory(self, traced: Any, lowered: Any, compiled: Built | Kept) -> Memory:
        """``memory_analysis()``'s figures, device memory only: without the
        buffer assignment's read, which ``fit`` and the policies do not need."""
        executable, module, _ = pieces(compiled)
        return compiled_memory(traced, lowered, executable, module=module)


def assignment_in_memory_analysis(lowered: Any) -> bool:
    """Whether ``memory_analysis()`` of a compile of ``lowered`` carries its
    buffer assignment (:func:`memscope._compat.executables.buffer_assignment_bytes`):
    XLA:CPU's does, on every supported jaxlib; XLA:GPU's PJRT plugin passes the
    sizes but not the assignment, nor does its serialized executable (seen on an
    H100 with jaxlib 0.10.2 and an H200 with 0.11.2), and XLA:TPU's has none.
    Where it does not, memscope compiles with XLA's dump and reads the
    assignment there (:mod:`memscope.compiled.dump`)."""
    return str(_compat.stages.lowering_client(lowered).platform) == "cpu"
