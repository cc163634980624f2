"""Compiling the captured programs for a TPU topology that is not here.

``memscope run --target tpu:v5p:2x2x1 train.py`` runs the script on this
machine's CPU, with as many simulated CPU devices as the topology has TPU
devices, and compiles every captured function once more with the real XLA:TPU
compiler (libtpu, through JAX's topology API): the program JAX traced here, its
shardings carried over device for device (:func:`memscope.compiled.targets.base.retargeted`).
Nothing runs on the target; its figures are the TPU compiler's own.

XLA:TPU's ``peak_memory_in_bytes`` is not the HBM a call needs: it also counts
the on-chip scratch memory the compiler plans (VMEM, memory space 1 on v5e, v5p
and v6e; CMEM, space 3, on v4), which is not HBM. memscope's peak on a TPU
target is read from the buffer assignment instead: the sum of its HBM (memory
space 0) allocations, arguments, outputs and the temporary block, which the
runtime holds for the whole call (:func:`memscope.report.hbm_peak_rule`).
``tests/test_tpu_target.py`` checks both against XLA's own figures.
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from memscope.compiled.read import HOST_MEMORY_SPACE, CompiledFacts
from memscope.compiled.targets import compilers
from memscope.compiled.targets.base import (
    Target,
    TargetSetupError,
    open_here,
    parse_form,
    stderr_to_nowhere,
)
from memscope.errors import first_line
from memscope.report import Memory, TargetInfo, hbm_peak_rule

GiB = 2**30


@dataclass(frozen=True)
class Generation:
    """One TPU generation as ``--target`` names it."""

    name: str
    #: JAX's ``device_kind`` of its devices
    device_kind: str
    #: HBM per chip, as the Cloud TPU documentation gives it (GB there, read as GiB)
    hbm_per_chip: int
    #: a topology of it that libtpu accepts, for the error that lists the forms
    example: str


GENERATIONS: dict[str, Generation] = {g.name: g for g in (
    Generation("v2", "TPU v2", 16 * GiB, "2x2"),
    Generation("v3", "TPU v3", 32 * GiB, "2x2"),
    Generation("v4", "TPU v4", 32 * GiB, "2x2x1"),
    Generation("v5e", "TPU v5 lite", 16 * GiB, "2x4"),
    Generation("v5p", "TPU v5", 95 * GiB, "2x2x1"),
    Generation("v6e", "TPU v6 lite", 32 * GiB, "2x2"),
    Generation("tpu7x", "TPU7x", 192 * GiB, "2x2x1"),
)}

HBM_SOURCE = ("HBM per chip as the Cloud TPU documentation gives it (GB there, read as "
              "GiB), divided among the chip's JAX devices; the TPU runtime reserves "
              "part of it, so a program close to it may still not fit")

_FORMS = ", ".join(f"tpu:{g.name}:{g.example}" for g in GENERATIONS.values())
_SPEC = re.compile(r"tpu:([a-z0-9]+):(\d+(?:x\d+){1,2})")


@dataclass(frozen=True)
class TpuSpec:
    """``--target tpu:v5p:2x2x1``, parsed."""

    generation: Generation
    dims: tuple[int, ...]

    @property
    def topology(self) -> str:
        """The topology as libtpu names it: ``v5p:2x2x1``."""
        return f"{self.generation.name}:{'x'.join(map(str, self.dims))}"

    @property
    def name(self) -> str:
        return f"tpu:{self.topology}"

    @property
    def chips(self) -> int:
        return math.prod(self.dims)


def parse_spec(text: str) -> TpuSpec:
    """Parse ``tpu:GENERATION:TOPOLOGY``.

    Raises:
        TargetSetupError: not of that form, or a generation memscope does not know.
    """
    match, generation = parse_form(text, _SPEC, GENERATIONS,
                                   f"give tpu:GENERATION:TOPOLOGY, one of the forms {_FORMS}")
    return TpuSpec(generation, tuple(int(d) for d in match.group(2).split("x")))


def libtpu_install_line() -> str:
    """The command that installs libtpu for ``--target tpu:`` where JAX does not
    load it into every program (:mod:`compilers`)."""
    return "memscope install-compiler tpu"


def open_target(spec: TpuSpec) -> TpuTarget:
    """The target's compile-only devices, from libtpu, with this process's JAX
    set up to run the program on the CPU with as many devices.

    Raises:
        TargetSetupError: libtpu is not installed, or it does not know the topology;
            JAX started already.
    """
    _check_installed(spec)
    # JAX_PLATFORMS=cpu keeps JAX from starting libtpu's TPU client on a machine
    # without TPUs (it prints warnings about missing TPU environment variables);
    # the topology API does not need that client.
    return open_here(spec.name, lambda: make_target(spec))


def make_target(spec: TpuSpec) -> TpuTarget:
    """The target's compile-only devices, from libtpu (JAX left as it is).

    Raises:
        TargetSetupError: libtpu is not installed, or it does not know the topology.
    """
    _check_installed(spec)
    # libtpu locks /tmp/libtpu_lockfile for the one process that may drive the
    # TPUs; a compile-only topology drives none, and two memscope runs at once
    # (or the program's own subprocesses) must not refuse each other.
    os.environ.setdefault("ALLOW_MULTIPLE_LIBTPU_LOAD", "1")
    try:
        with stderr_to_nowhere():
            devices = _topology(spec)
    except Exception as e:
        raise TargetSetupError(f"libtpu does not know the topology {spec.topology} "
                            f"({first_line(e)}); known forms: {_FORMS}") from None
    if devices[0].device_kind != spec.generation.device_kind:
        raise TargetSetupError(
            f"libtpu made {devices[0].device_kind} devices of {spec.topology}, where "
            f"memscope expects {spec.generation.device_kind}: this libtpu names its "
            "TPUs otherwise")
    return TpuTarget(spec, {d.id: d for d in devices})


def available() -> bool:
    """Whether libtpu is here without installing anything: in the Python
    environment (JAX loads it there) or in memscope's own folder (:mod:`compilers`)."""
    return compilers.in_environment("tpu") or compilers.kept_compiler("tpu").installed


def _check_installed(spec: TpuSpec) -> None:
    """libtpu loaded for ``spec``: JAX's, where JAX finds it in the environment,
    else memscope's own, installed the first time (:mod:`compilers`).

    Raises:
        TargetSetupError: it could not be installed or loaded.
    """
    compilers.load_compiler("tpu")


def _topology(spec: TpuSpec) -> list[Any]:
    try:
        return _topology_devices(spec.topology)
    except Exception as e:
        # A layout smaller than a host (2x2x1 chips) needs its own host bounds.
        if "chips_per_host_bounds" not in str(e):
            raise
        bounds = (*spec.dims, 1) if len(spec.dims) == 2 else spec.dims
        return _topology_devices(spec.topology, bounds)


def _topology_devices(name: str, chips_per_host: tuple[int, ...] | None = None
                      ) -> list[Any]:
    """The devices of the TPU topology ``name`` (``v5p:2x2x1``), compile-only.

    ``jax.experimental.topologies.get_topology_desc`` asks libtpu; a layout
    smaller than the default host (2x2x1 chips) needs ``chips_per_host`` given.
    """
    from jax.experimental import topologies

    kwargs: dict[str, Any] = {}
    if chips_per_host is not None:
        kwargs = {"chips_per_host_bounds": chips_per_host, "num_slices": 1}
    return list(topologies.get_topology_desc(platform="tpu", topology_name=name,
                                             **kwargs).devices)

class TpuTarget(Target):
    """The TPU topology the captured programs are compiled for."""

    platform = "tpu"

    def __init__(self, spec: TpuSpec, devices: Mapping[int, Any]) -> None:
        super().__init__(spec.name, devices)
        self.spec = spec

    def _identity(self) -> str:
        """The target's name and libtpu's version."""
        return f"{self.name}\n{compilers.version('tpu')}"

    @property
    def hbm_bytes(self) -> int:
        """HBM per JAX device (see :data:`HBM_SOURCE`)."""
        return self.spec.generation.hbm_per_chip * self.spec.chips // len(self.devices)

    @property
    def budget_bytes(self) -> int:
        return self.hbm_bytes

    def info(self) -> TargetInfo:
        """The target as the report records it."""
        return TargetInfo(name=self.spec.name, chip=self.spec.generation.device_kind,
                          chips=self.spec.chips, devices=len(self.devices),
                          hbm_bytes=self.hbm_bytes, hbm_source=HBM_SOURCE, kind="tpu")

    def _memory(self, facts: CompiledFacts) -> Memory:
        memory, buffers = facts.memory, facts.buffers
        hbm = on_chip = None
        parts: dict[str, int] = {}
        if buffers is not None:
            hbm = sum(a.size for a in buffers.allocations if a.color == 0)
            on_chip = sum(a.size for a in buffers.allocations
                          if a.color not in (0, HOST_MEMORY_SPACE))
            for a in buffers.allocations:
                if a.color == 0:
                    parts[a.kind] = parts.get(a.kind, 0) + a.size
        return hbm_peak_rule(memory, hbm, on_chip, parts)
