"""Compiling the captured programs for a TPU topology that is not here.

``memscope run --target tpu:v5p:2x2x1 train.py`` runs the script on this
machine's CPU, with as many simulated CPU devices as the topology has TPU
devices, and compiles every captured function once more with the real XLA:TPU
compiler (libtpu, through JAX's topology API): the program JAX traced here, its
shardings carried over device for device (:func:`memscope._compat.retargeted`).
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

import contextlib
import dataclasses
import importlib.util
import math
import os
import re
import sys
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, cast

import jax
import numpy as np

from memscope import _compat
from memscope.compiled.dump import Built, compile_dumped
from memscope.compiled.read import HOST_MEMORY_SPACE, CompiledFacts, read_stages
from memscope.errors import MemscopeError
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


class TpuSetupError(MemscopeError):
    """``--target`` cannot be set up: libtpu missing, a topology unknown, JAX
    started already."""


class TargetMismatch(ValueError):
    """A program's shardings do not map onto the target's devices."""


@dataclass(frozen=True)
class TargetSpec:
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


def parse_target(text: str) -> TargetSpec:
    """Parse ``tpu:GENERATION:TOPOLOGY``.

    Raises:
        TpuSetupError: not of that form, or a generation memscope does not know.
    """
    match = _SPEC.fullmatch(text.strip().lower())
    generation = GENERATIONS.get(match.group(1)) if match else None
    if match is None or generation is None:
        raise TpuSetupError(f"unknown target {text!r}: give tpu:GENERATION:TOPOLOGY, "
                            f"one of the forms {_FORMS}")
    return TargetSpec(generation, tuple(int(d) for d in match.group(2).split("x")))


def _use_host_devices(count: int) -> None:
    """Make this process's JAX start on the CPU with ``count`` devices, the
    target's, so that a mesh built from ``jax.devices()`` has the target's shape.

    XLA reads its flags once, when JAX starts its CPU backend: this runs before
    the program does. ``JAX_PLATFORMS=cpu`` keeps JAX from starting libtpu's TPU
    client on a machine without TPUs (it prints warnings about missing TPU
    environment variables); the topology API does not need that client.
    """
    flag = f"--xla_force_host_platform_device_count={count}"
    flags = re.sub(r"--xla_force_host_platform_device_count=\S*", "",
                   os.environ.get("XLA_FLAGS", ""))
    os.environ["XLA_FLAGS"] = f"{flags.strip()} {flag}".strip()


def libtpu_install_line() -> str:
    """The ``pip install`` that brings the libtpu matching the installed JAX."""
    return f'pip install "jax[tpu]=={jax.__version__}"'


def open_target(spec: TargetSpec) -> TpuTarget:
    """The target's compile-only devices, from libtpu.

    Raises:
        TpuSetupError: libtpu is not installed, or it does not know the topology.
    """
    if importlib.util.find_spec("libtpu") is None:
        raise TpuSetupError(f"--target {spec.name} needs libtpu, the TPU compiler: "
                            f"{libtpu_install_line()}")
    if _compat.backends_initialized():
        raise TpuSetupError(f"--target {spec.name} must be set up before JAX starts "
                            f"(it has, with {len(jax.devices())} "
                            f"{jax.default_backend()} devices)")
    os.environ["JAX_PLATFORMS"] = "cpu"  # for the processes the program starts
    jax.config.update("jax_platforms", "cpu")  # JAX read the variable when imported
    # libtpu locks /tmp/libtpu_lockfile for the one process that may drive the
    # TPUs; a compile-only topology drives none, and two memscope runs at once
    # (or the program's own subprocesses) must not refuse each other.
    os.environ.setdefault("ALLOW_MULTIPLE_LIBTPU_LOAD", "1")
    try:
        with _stderr_to_nowhere():
            devices = _topology(spec)
    except Exception as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise TpuSetupError(f"libtpu does not know the topology {spec.topology} ({first}); "
                            f"known forms: {_FORMS}") from None
    if devices[0].device_kind != spec.generation.device_kind:
        raise TpuSetupError(
            f"libtpu made {devices[0].device_kind} devices of {spec.topology}, where "
            f"memscope expects {spec.generation.device_kind}: this libtpu names its "
            "TPUs otherwise")
    _use_host_devices(len(devices))
    return TpuTarget(spec, {d.id: d for d in devices})


def _topology(spec: TargetSpec) -> list[Any]:
    try:
        return _compat.tpu_topology_devices(spec.topology)
    except Exception as e:
        # A layout smaller than a host (2x2x1 chips) needs its own host bounds.
        if "chips_per_host_bounds" not in str(e):
            raise
        bounds = (*spec.dims, 1) if len(spec.dims) == 2 else spec.dims
        return _compat.tpu_topology_devices(spec.topology, bounds)


@contextlib.contextmanager
def _stderr_to_nowhere() -> Iterator[None]:
    """Drop what libtpu writes to file descriptor 2 while it starts: warnings about
    TPU environment variables that a machine without TPUs does not set. Only
    before the program runs, as it drops the whole process's stderr."""
    sys.stderr.flush()
    saved = os.dup(2)
    try:
        with open(os.devnull, "wb") as devnull:
            os.dup2(devnull.fileno(), 2)
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


class TpuTarget:
    """The TPU topology the captured programs are compiled for."""

    def __init__(self, spec: TargetSpec, devices: Mapping[int, Any]) -> None:
        self.spec = spec
        self.devices = dict(devices)

    @property
    def hbm_bytes(self) -> int:
        """HBM per JAX device (see :data:`HBM_SOURCE`)."""
        return self.spec.generation.hbm_per_chip * self.spec.chips // len(self.devices)

    def info(self) -> TargetInfo:
        """The target as the report records it."""
        return TargetInfo(name=self.spec.name, chip=self.spec.generation.device_kind,
                          chips=self.spec.chips, devices=len(self.devices),
                          hbm_bytes=self.hbm_bytes, hbm_source=HBM_SOURCE)

    def sharding(self, s: Any) -> Any:
        """``s``, a sharding over this machine's devices, over the target's.

        Raises:
            TargetMismatch: it names a device the target does not have.
        """
        if _compat.is_unspecified_sharding(s) or isinstance(s, jax.sharding.AbstractMesh):
            return s
        if isinstance(s, jax.sharding.Mesh):
            return s if s.empty else self._mesh(s)
        if isinstance(s, jax.sharding.NamedSharding):
            mesh = s.mesh
            if not isinstance(mesh, jax.sharding.Mesh):  # an abstract mesh: no devices
                return s
            return jax.sharding.NamedSharding(self._mesh(mesh), s.spec,
                                              memory_kind=s.memory_kind)
        if isinstance(s, jax.sharding.SingleDeviceSharding):
            (device,) = s.device_set
            device = cast(Any, device)
            if device.id not in self.devices:
                raise TargetMismatch(
                    f"the program places an array on {device.platform}:{device.id}; "
                    f"{self.spec.name} has {len(self.devices)} devices")
            return jax.sharding.SingleDeviceSharding(self.devices[device.id],
                                                     memory_kind=s.memory_kind)
        raise TargetMismatch(f"a {type(s).__name__} does not carry over to {self.spec.name}: "
                             "memscope carries NamedSharding and SingleDeviceSharding")

    def _mesh(self, mesh: Any) -> Any:
        ids = [d.id for d in mesh.devices.flat]
        if max(ids) not in self.devices:
            axes = ", ".join(f"{name}={size}" for name, size in mesh.shape.items())
            raise TargetMismatch(
                f"the program's mesh ({axes}) spans {mesh.size} devices; {self.spec.name} "
                f"has {len(self.devices)}: build the mesh from jax.devices() (memscope "
                f"gives the program {len(self.devices)}) or name a topology of "
                f"{mesh.size} devices")
        devices = np.array([self.devices[i] for i in ids], dtype=object).reshape(
            mesh.devices.shape)
        return jax.sharding.Mesh(devices, mesh.axis_names, axis_types=mesh.axis_types)

    def lower(self, traced: Any) -> Any:
        """``traced`` (a ``jax.stages.Traced`` made here) lowered for the target.

        Raises:
            TargetMismatch: its shardings do not map onto the target's devices.
        """
        try:
            return _compat.retargeted(traced, self.devices, "tpu", self.sharding)
        except LookupError as e:
            raise TargetMismatch(f"the program runs on device {e.args[0]}; "
                                 f"{self.spec.name} has {len(self.devices)}") from None

    def compile(self, lowered: Any) -> Built:
        """Compile ``lowered`` (from :meth:`lower`) with XLA:TPU, keeping XLA's dump
        of the optimized module with its buffer assignment: XLA:TPU's
        ``memory_analysis()`` carries no buffer assignment."""
        return compile_dumped(lowered)

    def read(self, traced: Any, lowered: Any, built: Built, *,
             shardings: Sequence[Any] = (),
             ref_names: Mapping[int, str] | None = None) -> CompiledFacts:
        """Read ``built`` like a program compiled here, its peak by the HBM rule.
        ``shardings`` are the call's input shardings here; they are carried over."""
        facts = read_stages(traced, lowered, built.compiled,
                            shardings=[None if s is None else self.sharding(s)
                                       for s in shardings],
                            ref_names=ref_names, module=built.module,
                            assignment=built.assignment)
        return dataclasses.replace(facts, memory=self._hbm(facts))

    def memory(self, traced: Any, lowered: Any, built: Built) -> Memory:
        """The figures of ``built``, its peak by the HBM rule (``fit``, remat)."""
        return self.read(traced, lowered, built).memory

    def facts(self, traced: Any, shardings: Sequence[Any] = (),
              ref_names: Mapping[int, str] | None = None) -> CompiledFacts:
        """Lower, compile and read ``traced`` for the target, at once."""
        lowered = self.lower(traced)
        return self.read(traced, lowered, self.compile(lowered), shardings=shardings,
                         ref_names=ref_names)

    @staticmethod
    def _hbm(facts: CompiledFacts) -> Memory:
        memory, buffers = facts.memory, facts.buffers
        hbm = on_chip = None
        if buffers is not None:
            hbm = sum(a.size for a in buffers.allocations if a.color == 0)
            on_chip = sum(a.size for a in buffers.allocations
                          if a.color not in (0, HOST_MEMORY_SPACE))
        return hbm_peak_rule(memory, hbm, on_chip)

