"""Compiling the captured programs for NVIDIA GPUs that are not here.

``memscope run --target gpu:h100:8 train.py`` runs the script on this
machine's CPU, with 8 simulated CPU devices, and compiles every captured
function once more with the real XLA:GPU compiler of the installed CUDA plugin
(``jax-cuda13-plugin``, and ``ptxas`` from the ``nvidia-cuda-nvcc`` wheel for
the SASS), through JAX's topology API: the plugin makes compile-only devices
from a device description (a ``GpuTargetConfigProto``, rendered from
:mod:`~memscope.compiled.targets.gpu_devices`) and a topology (``1x1xN``: one
slice, one host, N devices; ``1xHxN`` for H hosts). No driver, cuDNN, cuBLAS
or NCCL is needed, and nothing runs on a GPU.

What differs from a compile on the device (held against real devices in
docs/performance.md): a deviceless compile does no autotuning, so XLA:GPU
takes its default GEMM tilings where the device's autotuner may pick others
(whose scratch can differ in size); ``cost_analysis()`` gives no FLOPs.
The peak follows XLA:GPU's rule as on a real GPU (:func:`memscope.report.peak_rule`).

The budget: a JAX program on a GPU may hold what JAX's allocator takes of the
device's memory: 75% by default, preallocated, ``XLA_CLIENT_MEM_FRACTION``
(or the older ``XLA_PYTHON_CLIENT_MEM_FRACTION``) for another fraction, all
of it with ``XLA_PYTHON_CLIENT_ALLOCATOR=platform``; read from this
environment when the target is set up (:func:`budget`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib.util
import os
import re
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from memscope import _compat
from memscope.compiled.cache import Kept
from memscope.compiled.dump import Built
from memscope.compiled.targets import compilers
from memscope.compiled.targets.base import (
    Target,
    TargetSetupError,
    open_here,
    parse_form,
    pieces,
    stderr_to_nowhere,
)
from memscope.compiled.targets.gpu_devices import MODELS, GpuModel
from memscope.errors import first_line
from memscope.report import TargetInfo

#: The fraction of a GPU's memory JAX's allocator takes by default (XLA's
#: ``GpuAllocatorConfig``), preallocated at its first use.
DEFAULT_MEMORY_FRACTION = 0.75

_BY_NAME: dict[str, GpuModel] = {n: m for m in MODELS for n in (m.name, *m.aliases)}
_FORMS = ", ".join(m.name for m in MODELS)
_SPEC = re.compile(r"gpu:([a-z0-9-]+)(?::(?:(\d+)x)?(\d+))?")


@dataclass(frozen=True)
class GpuSpec:
    """``--target gpu:h100:8`` (or ``gpu:h100:2x8``: 2 hosts of 8), parsed."""

    model: GpuModel
    devices_per_host: int = 1
    hosts: int = 1

    @property
    def name(self) -> str:
        hosts = f"{self.hosts}x" if self.hosts > 1 else ""
        return f"gpu:{self.model.name}:{hosts}{self.devices_per_host}"

    @property
    def devices(self) -> int:
        return self.devices_per_host * self.hosts

    @property
    def topology(self) -> str:
        """The topology as the CUDA plugin takes it: slices x hosts x devices."""
        return f"1x{self.hosts}x{self.devices_per_host}"


def parse_spec(text: str) -> GpuSpec:
    """Parse ``gpu:MODEL[:N]`` or ``gpu:MODEL:HxN``.

    Raises:
        TargetSetupError: not of that form, or a model memscope does not know.
    """
    match, model = parse_form(text, _SPEC, _BY_NAME,
                              f"give gpu:MODEL[:N] (N devices, or HxN: H hosts of N), "
                              f"MODEL one of {_FORMS}")
    hosts, count = int(match.group(2) or 1), int(match.group(3) or 1)
    if hosts < 1 or count < 1:
        raise TargetSetupError(f"--target {text}: a target has at least one device")
    return GpuSpec(model, count, hosts)


def target_config(model: GpuModel) -> str:
    """``model``'s description as the ``GpuTargetConfigProto`` text XLA:GPU parses."""
    major, minor = model.compute_capability
    extension = "\n    feature_extension: ACCELERATED_FEATURES" if model.accelerated else ""
    info = {
        "threads_per_block_limit": model.threads_per_block,
        "threads_per_warp": model.threads_per_warp,
        "shared_memory_per_block": model.shared_memory_per_block,
        "shared_memory_per_core": model.shared_memory_per_sm,
        "threads_per_core_limit": model.threads_per_sm,
        "core_count": model.sms,
        "fpus_per_core": model.fpus_per_sm,
        "block_dim_limit_x": 2**31 - 1,
        "block_dim_limit_y": 65_535,
        "block_dim_limit_z": 65_535,
        "memory_bandwidth": model.memory_bandwidth,
        "l2_cache_size": model.l2_cache_bytes,
        "clock_rate_ghz": model.clock_ghz,
        "device_memory_size": model.memory_bytes,
        "shared_memory_per_block_optin": model.shared_memory_per_block_optin,
    }
    lines = [f"  {key}: {value}" for key, value in info.items()]
    lines.append(f"  cuda_compute_capability {{\n    major: {major}\n    minor: {minor}"
                 f"{extension}\n  }}")
    lines += [f"  registers_per_core_limit: {model.registers_per_sm}",
              f"  registers_per_block_limit: {model.registers_per_block}"]
    body = "\n".join(lines)
    return (f"gpu_device_info {{\n{body}\n}}\nplatform_name: \"CUDA\"\n"
            f"dnn_version_info {{\n  major: 9\n  minor: 10\n}}\n"
            f"device_description_str: \"{model.device_kind}\"\n")


def budget(model: GpuModel, environ: dict[str, str] | None = None) -> tuple[int, str]:
    """What a JAX program may hold on one device of ``model``, and why: JAX's
    allocator settings as this environment sets them."""
    env = dict(os.environ if environ is None else environ)
    total = model.memory_bytes
    if env.get("XLA_PYTHON_CLIENT_ALLOCATOR", "").lower() == "platform":
        return total, ("all of the device's memory: XLA_PYTHON_CLIENT_ALLOCATOR=platform "
                       "allocates as the program asks")
    given = env.get("XLA_CLIENT_MEM_FRACTION") or env.get("XLA_PYTHON_CLIENT_MEM_FRACTION")
    try:
        fraction = float(given) if given else DEFAULT_MEMORY_FRACTION
    except ValueError:
        fraction, given = DEFAULT_MEMORY_FRACTION, None
    if not 0 < fraction <= 1:
        fraction, given = DEFAULT_MEMORY_FRACTION, None
    why = (f"the memory fraction set here, {given}" if given else
           "JAX's allocator takes 75% by default; XLA_CLIENT_MEM_FRACTION sets another")
    return int(total * fraction), why


def cuda_install_line() -> str:
    """The command that installs XLA:GPU's compiler for ``--target gpu:`` where
    JAX does not load it into every program (:mod:`compilers`)."""
    return "memscope install-compiler gpu"


def _plugin() -> bool:
    """Whether JAX finds a CUDA plugin in the Python environment (JAX's own
    ``cuda13-local`` extra); where not, memscope uses its own (:mod:`compilers`)."""
    return compilers.in_environment("cuda")


def available() -> bool:
    """Whether XLA:GPU's compiler is here without installing anything: in the
    Python environment with ptxas, or in memscope's own folder (whose ptxas is
    there only where it is installed)."""
    return ptxas() is not None


def ptxas() -> str | None:
    """The ptxas XLA:GPU will run: beside memscope's own CUDA compiler where it
    is the one used (:mod:`compilers`); else the ``nvidia-cuda-nvcc`` wheel's
    (``nvidia/cu13`` from CUDA 13, ``nvidia/cuda_nvcc`` before), else one on
    ``PATH``; ``None`` where there is none."""
    if not _plugin():
        return compilers.ptxas()
    try:  # NVIDIA's wheels share the namespace package ``nvidia``
        spec = importlib.util.find_spec("nvidia")
        roots = [Path(p) for p in (spec.submodule_search_locations or [])] if spec else []
    except (ImportError, ValueError):
        roots = []
    for root in roots:
        for folder in ("cu13", "cuda_nvcc"):
            if (root / folder / "bin" / "ptxas").is_file():
                return str(root / folder / "bin" / "ptxas")
    return shutil.which("ptxas")


def open_target(spec: GpuSpec) -> GpuTarget:
    """The target's compile-only devices, from the CUDA plugin, with this
    process's JAX set up to run the program on the CPU with as many devices.

    Raises:
        TargetSetupError: no CUDA plugin or ptxas; the plugin refuses the
            description or the topology; JAX started already.
    """
    _check_installed(spec)
    return open_here(spec.name, lambda: make_target(spec))


def make_target(spec: GpuSpec) -> GpuTarget:
    """The target's compile-only devices, from the CUDA plugin (JAX left as it is).

    Raises:
        TargetSetupError: no CUDA plugin or ptxas; the plugin refuses the
            description or the topology.
    """
    _check_installed(spec)
    try:
        with stderr_to_nowhere(), _no_cuda_check():
            devices = _compat.gpu_topology_devices(target_config(spec.model), spec.topology)
    except Exception as e:
        raise TargetSetupError(f"the CUDA plugin could not make {spec.name} "
                               f"({first_line(e)})") from None
    return GpuTarget(spec, {d.id: d for d in devices})


@contextlib.contextmanager
def _no_cuda_check() -> Iterator[None]:
    """While JAX loads the CUDA plugin: no check of the CUDA libraries a GPU would
    need (the plugin skips it with JAX_SKIP_CUDA_CONSTRAINTS_CHECK set, as with
    JAX_PLATFORMS=cpu; failing it, the plugin is not loaded, and JAX says the
    topology is "not implemented for cuda"). The variable is put back after."""
    name = "JAX_SKIP_CUDA_CONSTRAINTS_CHECK"
    before = os.environ.get(name)
    os.environ[name] = "1"
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = before


def _check_installed(spec: GpuSpec) -> None:
    """XLA:GPU's compiler loaded for ``spec``: JAX's, where JAX finds one in the
    environment, else memscope's own, installed the first time (:mod:`compilers`).

    Raises:
        TargetSetupError: it could not be installed or loaded, or has no ptxas.
    """
    if not _plugin():
        compilers.load("cuda")
    if ptxas() is None:
        where = ("beside the CUDA plugin JAX finds" if _plugin()
                 else f"in {compilers.compiler('cuda').folder}")
        raise TargetSetupError(f"--target {spec.name} needs ptxas, XLA:GPU's assembler, "
                               f"and there is none {where}: pip install "
                               f'"nvidia-cuda-nvcc>=13"')


#: XLA:GPU's error where its Triton GEMM emitter cannot tile a GEMM without autotuning.
NO_TILING = "Couldn't find output tile sizes"
#: XLA's debug option that builds GEMMs with cuBLAS instead of Triton.
NO_TRITON_GEMM: dict[str, Any] = {"xla_gpu_enable_triton_gemm": False}


class GpuTarget(Target):
    """The NVIDIA GPUs the captured programs are compiled for."""

    platform = "cuda"

    def __init__(self, spec: GpuSpec, devices: dict[int, Any],
                 environ: dict[str, str] | None = None) -> None:
        super().__init__(spec.name, devices)
        self.spec = spec
        self._budget = budget(spec.model, environ)

    @property
    def budget_bytes(self) -> int:
        return self._budget[0]

    flops_rule = ("FLOPs of each variant's unoptimized program, by XLA's cost analysis "
                  "here: XLA:GPU's deviceless compile counts none")

    #: compiles made again with XLA's Triton GEMMs off (see :meth:`compile`)
    without_triton = 0

    def _identity(self) -> str:
        """The target's name, its device description and the CUDA plugin's version."""
        return (f"{self.name}\n{target_config(self.spec.model)}\n"
                f"{compilers.version('cuda')}")

    def _compile(self, lowered: Any, options: dict[str, Any] | None = None) -> Built:
        """The target's compile. Without a GPU to tune on, XLA:GPU's Triton GEMM
        emitter fails to tile some GEMMs ("Couldn't find output tile sizes": the
        bundled transformer's step at batch 16 on gpu:h100, JAX 0.10.2); such a
        compile is made again with :data:`NO_TRITON_GEMM` (cuBLAS's GEMMs, which
        XLA:GPU also builds) and counted in :attr:`compile_note`."""
        try:
            return super()._compile(lowered, options)
        except Exception as e:
            if NO_TILING not in str(e):
                raise
        built = super()._compile(lowered, {**(options or {}), **NO_TRITON_GEMM})
        with self._count:
            self.without_triton += 1
        return dataclasses.replace(built, options={**built.options, **NO_TRITON_GEMM})

    def count_hit(self, kept: Kept) -> None:
        super().count_hit(kept)
        if kept.options.get("xla_gpu_enable_triton_gemm") is False:
            with self._count:
                self.without_triton += 1

    @property
    def compile_note(self) -> str | None:
        if not self.without_triton:
            return None
        return (f"{self.without_triton} of the target's compiles were made with XLA's "
                "Triton GEMMs off (xla_gpu_enable_triton_gemm=false): without a GPU to "
                f"tune on, their tiling failed (\"{NO_TILING}\"), and cuBLAS's GEMMs, "
                "which XLA:GPU also builds, stand in")

    def flops(self, traced: Any, compiled: Built | Kept) -> float | None:
        """XLA:GPU's count where it gives one; else the unoptimized program's,
        lowered here (no compile): the same rule for every variant compared."""
        found = _compat.flops(pieces(compiled)[0])
        return found if found is not None else _compat.flops(_compat.lower(traced))

    def info(self) -> TargetInfo:
        model = self.spec.model
        return TargetInfo(name=self.spec.name, chip=model.device_kind,
                          chips=self.spec.devices, devices=len(self.devices),
                          hbm_bytes=model.memory_bytes,
                          hbm_source=f"the device description's memory ({model.source})",
                          kind="gpu", budget_bytes=self.budget_bytes,
                          budget_source=self._budget[1],
                          description_source=model.source, compile_note=self.compile_note)
