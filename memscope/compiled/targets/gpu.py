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

The room: what fits at compile time is not what fits at run time. A JAX
program on a GPU may hold what JAX's allocator takes of the device's memory:
75% by default in every JAX memscope supports (XLA's ``GpuAllocatorConfig``;
preallocated, or taken as needed up to it with
``XLA_PYTHON_CLIENT_PREALLOCATE=false``), the fraction
``XLA_CLIENT_MEM_FRACTION`` (or the older ``XLA_PYTHON_CLIENT_MEM_FRACTION``)
sets, or all of it with ``XLA_PYTHON_CLIENT_ALLOCATOR=platform``. The
settings are read from this environment when the target is set up, as the
installed jaxlib reads them for the CUDA plugin (:func:`allocator_settings`;
a setting JAX would refuse is refused, in one line), and the room is
:func:`room`: ``fit --target`` searches against it, and the report says which
rule gave it. No growth beyond the fraction: XLA's growable pool (its
``memory_fraction_policy``, ``"0.75+"``) is nothing JAX's settings reach.

The same room is what XLA:GPU compiles against on the device: JAX hands the
allocator's limit to the compile (``device_memory_size`` in its build
options), and XLA:GPU's scheduler and its rematerialization take (that limit
less the program's arguments and outputs) x
``--xla_gpu_memory_limit_slop_factor`` (95%) as the memory they must fit; with
no limit (the platform allocator, or a compile without a device) XLA:GPU takes
80% of the device's memory instead. memscope's compiles for the target take
the room's limit as the device's would (:data:`Room.device_memory_size`), so
that a step whose peak crosses it is rematerialized here as there. Where the
peak comes within reach of the limit, the function is compiled once more with
XLA's rematerialization off, and the report gives its peak either way
(:meth:`GpuTarget.limit_check`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib.util
import math
import os
import re
import shutil
import struct
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from memscope import _compat
from memscope.compiled.cache import CompileCache, Kept
from memscope.compiled.compile import compile_to_read
from memscope.compiled.dump import Built, compile_dumped
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
from memscope.report import Memory, MemoryLimit, TargetInfo
from memscope.report.units import format_bytes

#: The fraction of a GPU's memory JAX's allocator takes by default (XLA's
#: ``GpuAllocatorConfig::memory_fraction``; JAX's docs/gpu_memory_allocation.rst),
#: the same in JAX 0.7 to 0.12.
DEFAULT_MEMORY_FRACTION = 0.75
#: The share of the device description's memory XLA:GPU's scheduler and
#: rematerialization start from where its compile is given no memory limit
#: (``GetSchedulerMemoryLimit``, xla/service/gpu/gpu_hlo_schedule.cc).
UNLIMITED_BASE = 0.8
#: A function's peak this share of the limit or more is compiled again without
#: XLA's rematerialization (:meth:`GpuTarget.limit_check`): rematerialization
#: acts only where the peak crosses the limit, and what it leaves is near it.
REMAT_REACH = 0.5
#: XLA's debug option that turns its rematerialization pass off (as JAX's own
#: ``jax_enable_remat_opt_pass=False`` does).
NO_REMAT: dict[str, Any] = {"xla_disable_hlo_passes": "rematerialization"}

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


class AllocatorSettingError(TargetSetupError):
    """A JAX allocator setting that JAX itself would refuse (or that leaves a
    program no memory): one line naming it and what to give."""


@dataclass(frozen=True)
class AllocatorSettings:
    """JAX's allocator settings on a GPU, as the installed jaxlib reads them
    from an environment for the CUDA plugin (``generate_pjrt_gpu_plugin_options``):
    the options it would hand the plugin. ``None``: not set (the plugin's default)."""

    #: ``XLA_PYTHON_CLIENT_ALLOCATOR``, lower-cased: ``default``, ``platform``, ...
    allocator: str = "default"
    memory_fraction: float | None = None
    #: which variable gave the fraction (``XLA_CLIENT_MEM_FRACTION`` or the
    #: older ``XLA_PYTHON_CLIENT_MEM_FRACTION``) and as what text
    fraction_name: str | None = None
    fraction_text: str | None = None
    preallocate: bool | None = None


def allocator_settings(environ: Mapping[str, str]) -> AllocatorSettings:
    """The allocator settings in ``environ``, read as the installed jaxlib
    reads them (alike in 0.7 to 0.12 but for the allocators each accepts:
    :data:`memscope._compat.GPU_ALLOCATORS`).

    Raises:
        AllocatorSettingError: where that jaxlib raises (both fraction
            variables set, a fraction that is no number, an allocator it does
            not know), and for a fraction that leaves no memory (0 or less,
            or not finite), which jaxlib hands on and XLA cannot allocate with.
    """
    allocator = environ.get("XLA_PYTHON_CLIENT_ALLOCATOR", "default").lower()
    if allocator not in _compat.GPU_ALLOCATORS:
        raise AllocatorSettingError(
            f"XLA_PYTHON_CLIENT_ALLOCATOR={allocator!r} is not an allocator jaxlib "
            f"{_compat.JAXLIB_VERSION} knows: give one of {', '.join(_compat.GPU_ALLOCATORS)}")
    name, text = "XLA_CLIENT_MEM_FRACTION", environ.get("XLA_CLIENT_MEM_FRACTION", "")
    older = environ.get("XLA_PYTHON_CLIENT_MEM_FRACTION", "")
    if older and text:
        raise AllocatorSettingError(
            f"XLA_CLIENT_MEM_FRACTION={text} and XLA_PYTHON_CLIENT_MEM_FRACTION={older} are "
            "both set, which JAX refuses: unset XLA_PYTHON_CLIENT_MEM_FRACTION, the older name")
    if older:
        name, text = "XLA_PYTHON_CLIENT_MEM_FRACTION", older
    fraction = None
    if text:
        try:
            fraction = float(text)
        except ValueError:
            raise AllocatorSettingError(
                f"{name}={text!r} is no number, which JAX refuses: give the fraction of the "
                "device's memory a program may hold (0.9 for 90%)") from None
        if not (math.isfinite(fraction) and fraction > 0):
            raise AllocatorSettingError(
                f"{name}={text} leaves a program no memory on the GPU: give the fraction of "
                "the device's memory a program may hold (0.9 for 90%)")
    preallocate = environ.get("XLA_PYTHON_CLIENT_PREALLOCATE", "")
    return AllocatorSettings(allocator, fraction, name if text else None, text or None,
                             preallocate not in ("false", "False", "0") if preallocate else None)


@dataclass(frozen=True)
class Room:
    """What a JAX program may hold on one GPU (``bytes``), the rule that gave
    it, in words, and the limit XLA:GPU compiles against on such a device."""

    #: ``None``: memscope does not know the allocator's limit
    bytes: int | None
    rule: str
    #: the allocator's limit, which JAX hands XLA:GPU's compile on the device
    #: as the device's memory (its build options' ``device_memory_size``);
    #: ``None``: none (the platform allocator, or one memscope does not know),
    #: and XLA:GPU takes 80% of the description's memory (:data:`UNLIMITED_BASE`)
    device_memory_size: int | None


def room(model: GpuModel, settings: AllocatorSettings) -> Room:
    """What a JAX program may hold on one device of ``model`` under ``settings``,
    and why.

    XLA takes the fraction of the device's total memory (``total_memory *
    memory_fraction`` in its BFC, CUDA-async and VMM allocators alike), the
    fraction as the plugin's float option carries it (32 bits: 0.9 is
    0.89999998). On a real H200 with JAX 0.11.2 the allocator's limit was
    within 0.001% of 75% of the memory the device reported
    (tests/data/gpu/h200_jax0.11.2.json).
    """
    total = model.memory_bytes
    memory = format_bytes(total)
    if settings.allocator == "platform":
        return Room(total, f"all of its {memory}: XLA_PYTHON_CLIENT_ALLOCATOR=platform "
                           "allocates as the program asks", None)
    if settings.allocator == "address":
        return Room(None, "XLA_PYTHON_CLIENT_ALLOCATOR=address: memscope does not know that "
                          "allocator's limit", None)
    fraction = (DEFAULT_MEMORY_FRACTION if settings.memory_fraction is None
                else settings.memory_fraction)
    limit = int(total * _float32(fraction))
    share = f"{100 * fraction:g}% of {memory}"
    if settings.fraction_name is None:
        rule = f"{share}, {_jax_series()}'s default; XLA_CLIENT_MEM_FRACTION sets another"
    else:
        rule = f"{share}, as {settings.fraction_name}={settings.fraction_text} sets"
    if fraction > 1:
        rule += ": more than the device has, so at most all of it"
    if settings.allocator != "default":
        rule += f" (XLA_PYTHON_CLIENT_ALLOCATOR={settings.allocator})"
    if settings.preallocate is False:
        rule += ", taken as needed (XLA_PYTHON_CLIENT_PREALLOCATE=false)"
    return Room(min(limit, total), rule, limit)


def room_here(model: GpuModel, environ: Mapping[str, str] | None = None) -> Room:
    """:func:`room` under the allocator settings of ``environ`` (this process's
    by default).

    Raises:
        AllocatorSettingError: a setting JAX would refuse (:func:`allocator_settings`).
    """
    return room(model, allocator_settings(os.environ if environ is None else environ))


def _float32(value: float) -> float:
    """``value`` as a 32-bit float, as the PJRT plugin's option carries it."""
    return float(struct.unpack("f", struct.pack("f", value))[0])


def _jax_series() -> str:
    found = _compat.series(_compat.JAX_VERSION)
    return f"JAX {found[0]}.{found[1]}" if found else f"JAX {_compat.JAX_VERSION}"


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
        return compilers.own_ptxas()
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
            description or the topology; JAX started already; an allocator
            setting JAX would refuse (:class:`AllocatorSettingError`).
    """
    room_here(spec.model)  # a setting JAX would refuse, before anything loads
    _check_installed(spec)
    return open_here(spec.name, lambda: make_target(spec))


def make_target(spec: GpuSpec) -> GpuTarget:
    """The target's compile-only devices, from the CUDA plugin (JAX left as it is).

    The room a program has on each device is read from this process's
    environment (:func:`room_here`).

    Raises:
        TargetSetupError: no CUDA plugin or ptxas; the plugin refuses the
            description or the topology; an allocator setting JAX would refuse
            (:class:`AllocatorSettingError`).
    """
    space = room_here(spec.model)
    _check_installed(spec)
    try:
        with stderr_to_nowhere(), _no_cuda_check():
            devices = _topology_devices(target_config(spec.model), spec.topology)
    except Exception as e:
        raise TargetSetupError(f"the CUDA plugin could not make {spec.name} "
                               f"({first_line(e)})") from None
    return GpuTarget(spec, {d.id: d for d in devices}, space)


def _topology_devices(target_config: str, topology: str) -> list[Any]:
    """The devices of a GPU topology (``1x1x8``: slices x hosts x devices) of the
    device ``target_config`` describes (a ``GpuTargetConfigProto`` in text),
    compile-only, from the installed CUDA plugin: JAX's topology API hands both
    to the plugin (``make_c_api_device_topology``'s options, JAX 0.7 to 0.12).
    Without the topology it would need a GPU here."""
    from jax.experimental import topologies

    return list(topologies.get_topology_desc(platform="cuda", target_config=target_config,
                                             topology=topology).devices)

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
        compilers.load_compiler("cuda")
    if ptxas() is None:
        where = ("beside the CUDA plugin JAX finds" if _plugin()
                 else f"in {compilers.kept_compiler('cuda').folder}")
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

    def __init__(self, spec: GpuSpec, devices: dict[int, Any], space: Room) -> None:
        super().__init__(spec.name, devices)
        self.spec = spec
        #: what a program may hold on each device, and the limit its compiles take
        self.room = space

    @property
    def budget_bytes(self) -> int | None:
        return self.room.bytes

    @property
    def budget_source(self) -> str:
        return self.room.rule

    @property
    def base_limit(self) -> int:
        """The memory XLA:GPU's scheduler and rematerialization start from for
        this target's compiles, as on the device: the allocator's limit, else
        80% of the device's memory."""
        size = self.room.device_memory_size
        return size if size is not None else int(self.spec.model.memory_bytes * UNLIMITED_BASE)

    flops_rule = ("FLOPs of each variant's unoptimized program, by XLA's cost analysis "
                  "here: XLA:GPU's deviceless compile counts none")

    #: compiles made again with XLA's Triton GEMMs off (see :meth:`compile`)
    without_triton = 0

    def _identity(self) -> str:
        """The target's name, its device description, the CUDA plugin's version
        and the memory limit its compiles take."""
        return (f"{self.name}\n{target_config(self.spec.model)}\n"
                f"{compilers.version('cuda')}\ndevice_memory_size "
                f"{self.room.device_memory_size}")

    def _compile(self, lowered: Any, options: dict[str, Any] | None = None) -> Built:
        """The target's compile, with the allocator's limit as the device's
        memory, as a compile on the device takes it (:class:`Room`). Without a
        GPU to tune on, XLA:GPU's Triton GEMM emitter fails to tile some GEMMs
        ("Couldn't find output tile sizes": the bundled transformer's step at
        batch 16 on gpu:h100, JAX 0.10.2); such a compile is made again with
        :data:`NO_TRITON_GEMM` (cuBLAS's GEMMs, which XLA:GPU also builds) and
        counted in :attr:`compile_note`."""
        size = self.room.device_memory_size
        try:
            return compile_dumped(lowered, options, device_memory_size=size)
        except Exception as e:
            if NO_TILING not in str(e):
                raise
        built = compile_dumped(lowered, {**(options or {}), **NO_TRITON_GEMM},
                               device_memory_size=size)
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

    def limit_check(self, traced: Any, lowered: Any, memory: Memory,
                    cache: CompileCache | None = None) -> MemoryLimit | None:
        """Where the peak of ``memory`` (the target's compile of ``lowered``) is
        within reach of the limit XLA:GPU compiled against (:data:`REMAT_REACH`
        of :attr:`base_limit` or more), ``lowered`` compiled once more with XLA's
        rematerialization off (:data:`NO_REMAT`; through ``cache``), and both
        peaks; else ``None``, with no compile: far below the limit, XLA:GPU's
        rematerialization leaves the program as it is."""
        if memory.peak_bytes is None or memory.peak_bytes < REMAT_REACH * self.base_limit:
            return None
        asked = self.options(lowered)
        passes = ",".join(p for p in (asked.get("xla_disable_hlo_passes"),
                                      NO_REMAT["xla_disable_hlo_passes"]) if p)
        try:
            compiled = compile_to_read(self, traced, lowered, cache=cache, counted=False,
                                       options={**asked, "xla_disable_hlo_passes": passes})
            unlimited = self.memory(traced, lowered, compiled).peak_bytes
        except Exception:  # the figures stand; only the comparison is missing
            unlimited = None
        return MemoryLimit(self.base_limit, memory.peak_bytes, unlimited)

    def flops(self, traced: Any, compiled: Built | Kept) -> float | None:
        """XLA:GPU's count where it gives one; else the unoptimized program's,
        lowered here (no compile): the same rule for every variant compared."""
        found = _compat.executables.flops(pieces(compiled)[0])
        return found if found is not None else _compat.executables.flops(_compat.stages.lower(traced))

    def info(self) -> TargetInfo:
        model = self.spec.model
        return TargetInfo(name=self.spec.name, chip=model.device_kind,
                          chips=self.spec.devices, devices=len(self.devices),
                          hbm_bytes=model.memory_bytes,
                          hbm_source=f"the device description's memory ({model.source})",
                          kind="gpu", budget_bytes=self.budget_bytes,
                          budget_source=self.room.rule,
                          description_source=model.source, compile_note=self.compile_note)
