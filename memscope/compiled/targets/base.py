"""What every target the captured programs are compiled for has in common:
this machine (:mod:`~memscope.compiled.targets.here`) and each ``--target``
accelerator alike, as JAX's ``jax/experimental/topologies.py`` treats this
machine's devices and a compile-only topology's as the same kind of thing.

A target lowers a traced program for its devices (:meth:`Target.lower`),
compiles it with XLA's buffer assignment at hand (:meth:`Target.compile`: from
``memory_analysis()`` or from XLA's dump of the compile) and reads it
(:meth:`Target.read`, :meth:`Target.memory`, :meth:`Target.flops`). Every
compile memscope only reads goes through one cached call on top of these,
:func:`memscope.compiled.compile.compile_to_read`.

An accelerator kind (:mod:`~memscope.compiled.targets.tpu`,
:mod:`~memscope.compiled.targets.gpu`) adds how its compile-only devices are
made (by XLA's compiler for it, through JAX's topology API), what its device
facts are and where they come from, the peak rule its figures follow, and the
budget a program has on each device.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import itertools
import os
import re
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, TypeVar, cast

import jax
import numpy as np

from memscope import _compat
from memscope.compiled.cache import CompileCache, Kept
from memscope.compiled.dump import Built, compile_dumped
from memscope.compiled.read import CompiledFacts, read_stages
from memscope.errors import MemscopeError
from memscope.report import Memory, MemoryLimit, TargetInfo

#: a target kind, as open_here returns what it is given to make
A = TypeVar("A", bound="Target")
K = TypeVar("K")


class TargetSetupError(MemscopeError):
    """``--target`` cannot be set up: its compiler missing, a form or topology
    unknown, JAX started already."""


class TargetMismatch(ValueError):
    """A program's shardings do not map onto the target's devices."""


def use_host_devices(count: int) -> None:
    """Make this process's JAX start on the CPU with ``count`` devices, the
    target's, so that a mesh built from ``jax.devices()`` has the target's shape.

    XLA reads its flags once, when JAX starts its CPU backend: this runs before
    the program does.
    """
    flag = f"--xla_force_host_platform_device_count={count}"
    flags = re.sub(r"--xla_force_host_platform_device_count=\S*", "",
                   os.environ.get("XLA_FLAGS", ""))
    os.environ["XLA_FLAGS"] = f"{flags.strip()} {flag}".strip()


def run_on_cpu(name: str) -> None:
    """Keep JAX to the CPU here (``JAX_PLATFORMS=cpu``), before it starts: the
    target's compiler needs no device of its kind, and a machine without one
    would otherwise have JAX try (and warn about) starting it.

    Raises:
        TargetSetupError: JAX has started its backends already.
    """
    if _compat.hooks.backends_initialized():
        raise TargetSetupError(f"--target {name} must be set up before JAX starts "
                               f"(it has, with {len(jax.devices())} "
                               f"{jax.default_backend()} devices)")
    os.environ["JAX_PLATFORMS"] = "cpu"  # for the processes the program starts
    jax.config.update("jax_platforms", "cpu")  # JAX read the variable when imported


def open_here(name: str, make: Callable[[], A]) -> A:
    """The target ``make`` sets up (its compile-only devices), with this process's
    JAX set up first to run the program on the CPU (:func:`run_on_cpu`), then
    with as many devices as the target (:func:`use_host_devices`).

    Raises:
        TargetSetupError: JAX started already, or what ``make`` raises.
    """
    run_on_cpu(name)
    target = make()
    use_host_devices(len(target.devices))
    return target


def parse_form(text: str, form: re.Pattern[str], known: Mapping[str, K], forms: str
               ) -> tuple[re.Match[str], K]:
    """``text`` matched against a kind's ``form``, and what its first group names
    among the ``known`` (a TPU generation, a GPU model).

    Raises:
        TargetSetupError: not of that form, or naming nothing known; ``forms``
            says what to give.
    """
    match = form.fullmatch(text.strip().lower())
    found = known.get(match.group(1)) if match else None
    if match is None or found is None:
        raise TargetSetupError(f"unknown target {text!r}: {forms}")
    return match, found


@contextlib.contextmanager
def stderr_to_nowhere() -> Iterator[None]:
    """Drop what a compiler's plugin writes to file descriptor 2 while it starts
    (warnings about devices a machine without them lacks). Only before the
    program runs, as it drops the whole process's stderr."""
    sys.stderr.flush()
    saved = os.dup(2)
    try:
        with open(os.devnull, "wb") as devnull:
            os.dup2(devnull.fileno(), 2)
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


#: A line of XLA's own log (absl's format): ``W1129 04:25:55.744687   20861
#: hlo_rematerialization.cc:3402] Can't reduce memory use below ...``
_XLA_LOG_LINE = re.compile(rb"^[IWEF]\d{4} \d\d:\d\d:\d\d\.\d+ +\d+ [\w./-]+:\d+\] ")


@contextlib.contextmanager
def compiler_logs_dropped() -> Iterator[None]:
    """Keep XLA's own log lines out of stderr while the block compiles (the
    rest written to file descriptor 2 is written there after it, in order).

    ``fit`` compiles sizes over the device's limit on purpose, and XLA:GPU's
    rematerialization logs a warning for each it cannot bring under it (and
    its scheduler an error where the arguments alone exceed it): a screenful
    that says what fit's table says. Only where the program no longer runs,
    as it holds the whole process's stderr for the block.
    """
    sys.stderr.flush()
    saved = os.dup(2)
    try:
        with tempfile.TemporaryFile() as held:
            os.dup2(held.fileno(), 2)
            try:
                yield
            finally:
                sys.stderr.flush()
                os.dup2(saved, 2)
                held.seek(0)
                kept = [line for line in held if not _XLA_LOG_LINE.match(line)]
                if kept:
                    os.write(2, b"".join(kept))
    finally:
        os.close(saved)


@dataclasses.dataclass(frozen=True)
class CompileProgress:
    """The compiles for one target at one moment (:meth:`Target.progress`)."""

    target: str
    #: compiles ended (made, or read from memscope's cache)
    done: int
    #: what is compiling now, and for how many seconds so far
    running: tuple[tuple[str, float], ...]
    #: compiles asked for and not begun
    waiting: int

    @property
    def left(self) -> int:
        return len(self.running) + self.waiting


class Target:
    """Where the captured programs are compiled: this machine, or an
    accelerator that is not here, compiled for and nothing run on.

    A kind sets :attr:`platform` (the lowering rules: ``cpu``, ``tpu``,
    ``cuda``), makes the devices, and says what the report records
    (:meth:`info`), the budget a program has on each device
    (:attr:`budget_bytes`), the XLA options a compile to read takes
    (:meth:`options`) and the peak rule (:meth:`_memory`).
    """

    platform: str = ""
    #: whether the programs also run here, on these devices (this machine), or
    #: are only compiled for them (``--target``)
    runs_here: bool = False

    def __init__(self, name: str, devices: Mapping[int, Any]) -> None:
        self.name = name
        self._devices = dict(devices)
        #: the target's compiles so far (the functions', variants', policies' and
        #: fit's sizes), and the seconds they took with their dumps read
        self.compiles = 0
        self.compile_seconds = 0.0
        #: compiles read from memscope's cache instead
        self.cache_hits = 0
        self._count = threading.Lock()
        #: what is compiling for the target now (:meth:`compiling`), and since when
        self._running: dict[int, tuple[str, float]] = {}
        self._waiting = 0
        self._finished = 0
        self._tokens = itertools.count()

    def expect(self, count: int = 1) -> None:
        """Note ``count`` compiles asked for and not begun (queued behind others)."""
        with self._count:
            self._waiting += count

    @contextlib.contextmanager
    def compiling(self, what: str) -> Iterator[None]:
        """Count ``what`` (``train_step as written``) as compiling for the target
        while the block runs, made or read from the cache; one compile
        :meth:`expect` asked for has begun."""
        with self._count:
            token = next(self._tokens)
            self._running[token] = (what, time.monotonic())
            self._waiting = max(self._waiting - 1, 0)
        try:
            yield
        finally:
            with self._count:
                del self._running[token]
                self._finished += 1

    def progress(self) -> CompileProgress:
        """What the target's compiles have come to, now."""
        now = time.monotonic()
        with self._count:
            running = tuple((what, now - since) for what, since in self._running.values())
            return CompileProgress(self.name, self._finished, running, self._waiting)

    @property
    def devices(self) -> dict[int, Any]:
        """The target's devices, by id."""
        return self._devices

    @functools.cached_property
    def identity(self) -> str:
        """What a compile for the target depends on beyond the lowered program
        and the backend it names (:meth:`memscope.compiled.cache.CompileCache.key`):
        the target's name, and its compiler's version and device description
        where memscope loads them (:meth:`_identity`). Read once: every compile's
        key names it."""
        return self._identity()

    def _identity(self) -> str:
        return self.name

    def count_hit(self, kept: Kept) -> None:
        """Count ``kept``, a compile read from the cache instead of made."""
        with self._count:
            self.cache_hits += 1

    def info(self) -> TargetInfo | None:
        """The target as the report records it (``None``: this machine, which the
        run's own facts describe)."""
        raise NotImplementedError

    @property
    def budget_bytes(self) -> int | None:
        """What a program may hold on one device (``fit``'s default limit);
        ``None`` where the target does not say."""
        raise NotImplementedError

    @property
    def budget_source(self) -> str | None:
        """Which rule gave :attr:`budget_bytes`, in words (``None``: nothing to say)."""
        return None

    def limit_check(self, traced: Any, lowered: Any, memory: Memory,
                    cache: CompileCache | None = None) -> MemoryLimit | None:
        """Whether the target's compiler changed the compiled program ``memory``
        was read from (``lowered``, from :meth:`lower`) to fit its memory limit,
        found by compiling it once more without that; ``None`` where not
        checked (by default: never)."""
        return None

    def options(self, lowered: Any, *, sizes: bool = False) -> dict[str, Any]:
        """XLA's debug options for a compile memscope only reads (``sizes``: one
        of ``fit``'s sizes, which need not fit); none by default."""
        return {}

    def mesh(self, shape: tuple[int, ...], axis_names: tuple[str, ...]) -> Any:
        """A ``jax.sharding.Mesh`` of the target's devices, in their order, of
        ``shape`` (for a compile-only analysis's shardings)."""
        devices = list(self.devices.values())
        return jax.sharding.Mesh(np.array(devices, dtype=object).reshape(shape), axis_names)

    def sharding(self, s: Any) -> Any:
        """``s``, a sharding over this machine's devices, over the target's.

        Raises:
            TargetMismatch: it names a device the target does not have.
        """
        if _compat.targets.is_unspecified_sharding(s) or isinstance(s, jax.sharding.AbstractMesh):
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
                    f"{self.name} has {len(self.devices)} devices")
            return jax.sharding.SingleDeviceSharding(self.devices[device.id],
                                                     memory_kind=s.memory_kind)
        raise TargetMismatch(f"a {type(s).__name__} does not carry over to {self.name}: "
                             "memscope carries NamedSharding and SingleDeviceSharding")

    def _mesh(self, mesh: Any) -> Any:
        ids = [d.id for d in mesh.devices.flat]
        if max(ids) not in self.devices:
            axes = ", ".join(f"{name}={size}" for name, size in mesh.shape.items())
            raise TargetMismatch(
                f"the program's mesh ({axes}) spans {mesh.size} devices; {self.name} "
                f"has {len(self.devices)}: build the mesh from {len(self.devices)} of "
                f"jax.devices() (this run has {jax.device_count()}) or name a target "
                f"of {mesh.size} devices")
        devices = np.array([self.devices[i] for i in ids], dtype=object).reshape(
            mesh.devices.shape)
        return jax.sharding.Mesh(devices, mesh.axis_names, axis_types=mesh.axis_types)

    def lower(self, traced: Any) -> Any:
        """``traced`` (a ``jax.stages.Traced`` made here) lowered for the target.

        Raises:
            TargetMismatch: its shardings do not map onto the target's devices.
        """
        try:
            return retargeted(traced, self.devices, self.platform, self.sharding)
        except LookupError as e:
            raise TargetMismatch(f"the program runs on device {e.args[0]}; "
                                 f"{self.name} has {len(self.devices)}") from None

    def compile(self, lowered: Any, options: dict[str, Any] | None = None) -> Built:
        """Compile ``lowered`` (from :meth:`lower`) with the target's XLA and XLA
        debug ``options``, with its buffer assignment at hand: here XLA's dump
        of the optimized module with its assignment, as a compile-only
        ``memory_analysis()`` carries none. Counted in :attr:`compiles`."""
        start = time.perf_counter()
        try:
            return self._compile(lowered, options)
        finally:
            with self._count:
                self.compiles += 1
                self.compile_seconds += time.perf_counter() - start

    def _compile(self, lowered: Any, options: dict[str, Any] | None) -> Built:
        return compile_dumped(lowered, options)

    def read(self, traced: Any, lowered: Any, compiled: Built | Kept, *,
             shardings: Sequence[Any] = (),
             ref_names: Mapping[int, str] | None = None) -> CompiledFacts:
        """Read ``compiled`` (a compile of ``lowered``, or what the cache kept of
        one), its peak by the target's rule. ``shardings`` are the call's input
        shardings here; they are carried over to the target's devices."""
        executable, module, assignment = pieces(compiled)
        facts = read_stages(traced, lowered, executable,
                            shardings=[None if s is None else self.sharding(s)
                                       for s in shardings],
                            ref_names=ref_names, module=module, assignment=assignment)
        return dataclasses.replace(facts, memory=self._memory(facts))

    def memory(self, traced: Any, lowered: Any, compiled: Built | Kept) -> Memory:
        """The figures of ``compiled``, its peak by the target's rule (``fit``, remat)."""
        return self.read(traced, lowered, compiled).memory

    #: what :meth:`flops` counts where the target's compile counts none (else None)
    flops_rule: str | None = None

    @property
    def compile_note(self) -> str | None:
        """How some of the target's compiles were made otherwise than the rest
        (``None``: all alike)."""
        return None

    def flops(self, traced: Any, compiled: Built | Kept) -> float | None:
        """The FLOPs of ``compiled`` (the target's compile of ``traced``), by XLA's
        cost analysis of it; ``None`` where it gives none."""
        return _compat.executables.flops(pieces(compiled)[0])

    def _memory(self, facts: CompiledFacts) -> Memory:
        """The figures as the target's peak rule reads them (by default, as here)."""
        return facts.memory


def pieces(compiled: Built | Kept) -> tuple[Any, bytes | None, bytes | None]:
    """The executable (or what stands in for it) of a compile or a kept one, and
    the optimized module and buffer assignment given apart from it (``None``:
    read from the executable)."""
    if isinstance(compiled, Kept):
        return compiled, compiled.module, compiled.assignment
    return compiled.compiled, compiled.module, compiled.assignment


def retargeted(traced: Any, devices: dict[int, Any], platform: str,
               sharding: Callable[[Any], Any]) -> Any:
    """``traced`` (a ``jax.stages.Traced`` of a call made here) lowered for
    ``platform`` and set to compile for other devices: ``devices`` maps each
    device id of the call's device assignment to the target's device, and
    ``sharding`` maps each of its shardings (arguments, results, the context
    mesh) to the target's.

    The program is the very one JAX traced here (the jit's own shardings, its
    sharding constraints and mesh context included), lowered with the target's
    lowering rules (``lowering_platforms``, JAX's cross-platform lowering). Its
    shardings name devices by their place in the device assignment, so the
    target's devices take the places of this machine's, id for id (what JAX
    compiles with: :func:`memscope._compat.targets.mesh_compile_args`).

    Raises:
        LookupError: the call's devices name one ``devices`` lacks (its id).
    """
    lowered = traced.lower(lowering_platforms=(platform,))
    args = dict(_compat.targets.mesh_compile_args(lowered))
    first = next(iter(devices.values()))
    args["backend"] = first.client
    args["in_shardings"] = tuple(sharding(s) for s in args["in_shardings"])
    args["out_shardings"] = tuple(sharding(s) for s in args["out_shardings"])
    if args.get("intermediate_shardings"):
        args["intermediate_shardings"] = tuple(sharding(s)
                                               for s in args["intermediate_shardings"])
    if args.get("context_mesh") is not None:
        args["context_mesh"] = sharding(args["context_mesh"])
    assignment = _compat.targets.device_assignment(lowered)
    return _compat.targets.with_compile_args(lowered, args, None if assignment is None else tuple(
        _target_device(devices, d) for d in assignment))


def _target_device(devices: dict[int, Any], device: Any) -> Any:
    try:
        return devices[device.id]
    except KeyError:
        raise LookupError(device.id) from None
