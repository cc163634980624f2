"""Instrument ``jax.jit`` during a run; record signatures and compiled facts, never arrays.

Inside :func:`capture`, every jit object JAX makes is handed back inside a
:class:`MeasuredJit`: a transparent stand-in that forwards every attribute to the
real jit object and, for each top-level call, counts the call under its
signature. The first call of a new signature is followed by one read of the
compiled program (cache hits only, see :mod:`memscope.compiled`).

What is kept per signature: shapes, dtypes, shardings, static argument values
and the facts read from the compiled program. Arrays are only looked at during
the call that passes them.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import functools
import inspect
import linecache
import os
import threading
import time
import types
import weakref
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import jax
import numpy as np

from memscope import _compat, advice, between, keys, oom, remat, sites, wrappers
from memscope.advice import AdviceLevel, advice_level
from memscope.compiled import (
    CompiledFacts,
    CompiledHandles,
    LoweredVariant,
    compile_variants,
    describe_sharding,
    lower_variant,
    read_handles,
    take_compiled,
)
from memscope.donation import (
    Argument,
    Donation,
    DonationSpec,
    Spelling,
    Style,
    advised,
    as_written,
    donate_all,
    donate_none,
    resolve_spec,
    wider_note,
)
from memscope.errors import MemscopeError, TargetStopped
from memscope.fates import classify
from memscope.observed import Addresses, Observation
from memscope.report import (
    Forecast,
    LiveArray,
    LiveArrays,
    MeasuredMemory,
    MemorySample,
    Overhead,
    Remat,
    RematVariant,
    Runtime,
    VariantName,
)
from memscope.worker import Worker

# memscope's own frames are never the user's source line (see _compat).
_compat.exclude_from_source_info(os.path.dirname(os.path.abspath(__file__)))

#: Device-memory samples kept per run (one per top-level call); later calls are
#: not sampled, and the report says the timeline was cut.
MAX_SAMPLES = 10_000
#: Live arrays listed by size at the end of a run.
LARGEST_LIVE_ARRAYS = 10


@dataclass(frozen=True)
class VariantRequest:
    """Also compile the captured functions with the donation ``spec`` (``memscope diff``).

    ``functions`` names the functions to do it for; ``None`` means all.
    """

    spec: DonationSpec
    functions: frozenset[str] | None = None


@dataclass(frozen=True)
class VariantFacts:
    """One entry compiled with another donation; ``setting`` in jax.jit's keywords."""

    name: VariantName
    setting: str
    facts: CompiledFacts | None
    warnings: tuple[str, ...] = ()
    same_as_written: bool = False
    error: str | None = None
    #: labels of the arguments this variant donates that the function does not
    added: tuple[str, ...] = ()
    #: what the setting does beyond the donation asked for (a wrapper's limits)
    note: str | None = None
    #: the variant planned before this one with the same donation (one compile)
    same_as: VariantName | None = None


@dataclass(frozen=True)
class KeptCall:
    """A call in shapes: the jit object JAX made, the call's arguments with every
    array as a ``jax.ShapeDtypeStruct`` (shape, dtype, sharding), and its dynamic
    top-level arguments in JAX's terms. Enough to compile it again at other
    shapes; no array is kept."""

    jitted: Any
    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    arguments: tuple[Argument, ...]


@dataclass
class Entry:
    """One jitted function at one signature, as observed during a capture.

    Mutable while the capture runs (``calls`` grows); turned into a frozen
    :class:`memscope.report.FunctionReport` by :mod:`memscope.analysis`.
    """

    name: str
    source: str | None
    signature: str
    spec: _compat.JitSpec
    calls: int = 0
    facts: CompiledFacts | None = None
    warnings: tuple[str, ...] = ()
    error: str | None = None
    #: the call's top-level dynamic arguments, and how the user spells donation
    arguments: tuple[Argument, ...] = ()
    style: Spelling = "argnames"
    #: the call as the user wrote it, when a framework's wrapper made the jit
    wrapper: wrappers.Wrapped | None = None
    variants: list[VariantFacts] = field(default_factory=list)
    #: the first call's buffers, as integers
    observation: Observation | None = None
    measured: MeasuredMemory | None = None
    #: the installed package that defines the function, when it is not the user's
    library: str | None = None
    #: what JAX keys the executable on (:meth:`MeasuredJit._call_key`), for
    #: explaining a recompile; holds no array
    key: Any = None
    #: seconds JAX spent compiling at the first call (its monitoring events)
    compile_seconds: float | None = None
    #: the number of the top-level call that first ran this signature
    first_call: int | None = None
    #: the flat leaves the jit object donates (JAX's order)
    donated: tuple[int, ...] = ()
    #: each leaf's sharding as spelled, read off the program's path
    shardings: tuple[str | None, ...] = ()
    #: the out-of-memory error a call of it ended in, as JAX's text
    failure: str | None = None
    #: where it failed: "call" (running) or "compile"
    failed_in: str | None = None
    #: jax.live_arrays() and device memory when it failed
    failure_live: LiveArrays | None = None
    failure_memory: tuple[int, int | None] | None = None
    #: the jit object and its call with arrays as ShapeDtypeStructs, kept when the
    #: session keeps calls (``memscope fit``) or the call ran out of memory
    call: KeptCall | None = None
    #: what batch would fit, for the post-mortem (see :mod:`memscope.fit`)
    forecast: Forecast | None = None
    #: residuals and measured checkpoint policies (see :mod:`memscope.remat`)
    remat: Remat | None = None
    #: the user's line that made the jit, its file's SHA-256 then, and the first
    #: call's line (``path:line``; ``None``: not in the user's code)
    jit_site: str | None = None
    jit_file_sha256: str | None = None
    call_site: str | None = None

    @property
    def setting(self) -> str | None:
        """The donation as written, in jax.jit's keywords; ``None`` if unknown."""
        if self.facts is None or (sum(len(a.leaves) for a in self.arguments)
                                  != len(self.facts.program.donated)):
            return None
        return as_written(self.arguments, self.facts.program.donated).setting(
            self.arguments, self.style)


class Session:
    """The entries of one capture, in the order their first call happened."""

    def __init__(self, proxy: Any, *, advise: bool | AdviceLevel = False,
                 request: VariantRequest | None = None,
                 stop_after: int | None = None,
                 remat_flops: float | None = None) -> None:
        self.entries: list[Entry] = []
        self.active = True
        self.advice: AdviceLevel = advice_level(advise)
        #: measure checkpoint policies of differentiated functions (with advice)
        self.remat = remat_flops is not None and self.advice != "off"
        self.remat_flops = (remat_flops if remat_flops is not None
                            else remat.DEFAULT_MAX_FLOPS_INCREASE)
        if remat_flops is not None and remat_flops < 0:
            raise MemscopeError(f"remat_flops must be at least 0, got {remat_flops}")
        self.request = request
        self.stop_after = stop_after
        #: keep each entry's call in shapes (``memscope fit`` compiles it again)
        self.keep_calls = False
        #: end the target at the first call of a signature seen before (the loop began)
        self.stop_at_repeat = False
        self._stop_hit = False
        self.calls = 0
        self._proxy = proxy
        self._lock = threading.Lock()
        self._by_key: dict[Any, Entry] = {}
        self._stats_available: bool | None = None  # asked at the first call, not before
        self._samples: list[MemorySample] = []
        self._truncated = False
        self._live: LiveArrays | None = None
        self._unread: list[tuple[Entry, Unread]] = []
        self._finished = False
        #: compile time, live arrays over the run, donated buffers (:mod:`memscope.between`)
        self.clock = between.CompileClock()
        self.live_sampler = between.LiveSampler()
        self.ledger = between.DonationLedger()
        #: memscope's work off the program's path (see :mod:`memscope.worker`)
        self.worker = Worker()
        self._waited: float | None = None
        self.variant_compiles = 0
        self.variants_reused = 0
        #: compiles of ``jax.pmap`` that ran outside ``jax.jit`` (JAX 0.7), unseen
        self.uncaptured_pmaps = 0
        #: the SHA-256 of each file a jit was made in (read once per run)
        self.file_hashes: dict[str, str | None] = {}

    @property
    def stopped(self) -> bool:
        """True once ``stop_after`` calls ran and the target was told to end."""
        return self._stop_hit or (self.stop_after is not None and self.calls >= self.stop_after)

    def device_memory(self) -> tuple[int, int] | None:
        """(bytes in use, peak bytes in use) of the busiest local device, or ``None``
        where the backend keeps no such statistics (CPU)."""
        if self._stats_available is False:
            return None
        try:
            stats = [d.memory_stats() for d in jax.local_devices()]
            figures = (max(int(s["bytes_in_use"]) for s in stats),
                       max(int(s["peak_bytes_in_use"]) for s in stats))
        except Exception:  # None (CPU), a missing key, or no devices
            self._stats_available = False
            return None
        self._stats_available = True
        return figures

    def sample(self, function: str) -> None:
        """Record device memory right after a top-level call, where it is kept."""
        if self._stats_available is False:
            return
        if len(self._samples) >= MAX_SAMPLES:
            self._truncated = True
            return
        figures = self.device_memory()
        if figures is not None:
            self._samples.append(MemorySample(self.calls + 1, function, *figures))

    def finish(self) -> None:
        """Note what the run left alive; the first call counts (the target's end)."""
        if self._finished:
            return
        self._finished = True
        self.settle(final=True)
        if not _compat.backends_initialized():
            return  # the target used no device; do not start one now
        with contextlib.suppress(Exception):
            self.live_sampler.at_end(self.calls)
        self._live = live_arrays()

    def runtime(self) -> Runtime:
        """What the run showed of device memory and live arrays, frozen."""
        overhead = self.overhead()
        timeline = self.live_sampler.timeline(output_label)
        if self._stats_available:
            return Runtime(device_memory=tuple(self._samples),
                           timeline_truncated=self._truncated, live_arrays=self._live,
                           overhead=overhead, live_timeline=timeline)
        note = ("no jitted call ran" if self._stats_available is None else
                f"{jax.default_backend()} keeps no device memory statistics: "
                "Device.memory_stats() is None")
        return Runtime(device_memory_note=note, live_arrays=self._live, overhead=overhead,
                       live_timeline=timeline)

    def after_call(self, entry: Entry, out: Any) -> None:
        """Device memory and live arrays after a top-level call (before it is counted)."""
        self.sample(entry.name)
        with contextlib.suppress(Exception):  # never break the program for a sample
            self.live_sampler.after_call(self.calls + 1, entry.name, entry, out)

    def defer(self, job: Callable[[], None]) -> None:
        """Run ``job`` off the program's path, before the capture ends."""
        self.worker.submit(job)

    def wait(self) -> None:
        """Wait for the deferred work: the program has ended, the report needs it.

        Ctrl-C while waiting drops the work not done yet: its entries say so in
        ``error``, and the report is built from the rest.
        """
        if self._waited is not None:
            return
        start = time.perf_counter()
        try:
            self._waited = self.worker.wait() if self.worker.started else 0.0
        except KeyboardInterrupt:
            self._waited = time.perf_counter() - start
            with self._lock:  # after the cancel: no result is published any more
                for entry in self.entries:
                    if entry.facts is None and entry.error is None:
                        entry.error = ("not read: memscope's analysis was interrupted "
                                       "after the program ended")
        finally:
            self.worker.close()

    def publish(self, apply: Callable[[], None]) -> None:
        """Apply deferred results to the entries, unless the wait was abandoned
        (the report may then be being built from them)."""
        with self._lock:
            if not self.worker.cancelled:
                apply()

    def count_variants(self, *, compiled: int, reused: int) -> None:
        """Count the variants compiled, and those answered without a compile."""
        with self._lock:
            self.variant_compiles += compiled
            self.variants_reused += reused

    def overhead(self) -> Overhead | None:
        """What memscope's own work cost; ``None`` before :meth:`wait`."""
        if self._waited is None:
            return None
        return Overhead(analysis_seconds=self.worker.busy_seconds,
                        after_exit_seconds=self._waited,
                        host_bytes=self.worker.largest_growth,
                        variant_compiles=self.variant_compiles,
                        variants_reused=self.variants_reused)

    def observed(self, entry: Entry, seen: Observation | Unread | _Failed) -> None:
        """Keep what a first call's buffers showed; read later what is not ready."""
        if isinstance(seen, Unread):
            with self._lock:
                self._unread.append((entry, seen))
        elif isinstance(seen, _Failed):
            self.failed(entry, seen.error, exclude=seen.outputs)
        else:
            entry.observation = seen

    def settle(self, *, final: bool = False) -> None:
        """Read the outputs of earlier first calls that are ready by now (all of
        them, waiting, when ``final``: the program has ended)."""
        if not self._unread:
            return
        with self._lock:
            unread, self._unread = self._unread, []
        for entry, pending in unread:
            seen = pending.read(final=final)
            if seen is None and not final and all(r is None or r() is not None
                                                  for r in pending.outputs):
                with self._lock:
                    self._unread.append((entry, pending))
            elif isinstance(seen, _Failed):
                self.failed(entry, seen.error, exclude=seen.outputs)
            elif seen is not None:
                entry.observation = seen

    def failed(self, entry: Entry, error: BaseException, where: str = "call",
               exclude: Sequence[Any] = ()) -> None:
        """Note that a call of ``entry`` ended in ``error`` (the program meets it),
        when the error says memory ran out: what was alive then, in figures."""
        if entry.failure is not None or not oom.is_out_of_memory(str(error)):
            return
        entry.failure, entry.failed_in = f"{type(error).__name__}: {error}", where
        entry.failure_live = live_arrays(exclude)
        entry.failure_memory = self.device_limits()

    def device_limits(self) -> tuple[int, int | None] | None:
        """(bytes in use, the device's limit) on the busiest local device; ``None``
        where the backend keeps no statistics (CPU)."""
        try:
            stats = [d.memory_stats() for d in jax.local_devices()]
            busiest = max(stats, key=lambda s: int(s["bytes_in_use"]))
        except Exception:  # None (CPU), a missing key, or no devices
            return None
        limit = busiest.get("bytes_limit")
        return int(busiest["bytes_in_use"]), None if limit is None else int(limit)

    def count_call(self, *, repeat: bool = False) -> None:
        """Count one top-level jitted call; end the target once ``stop_after`` ran
        (or at a ``repeat``: a signature called before, with ``stop_at_repeat``).

        Raises:
            TargetStopped: this call was number ``stop_after``.
        """
        with self._lock:
            self.calls += 1
            stop = ((self.stop_after is not None and self.calls == self.stop_after)
                    or (self.stop_at_repeat and repeat))
        if stop:
            self._stop_hit = True
            self.active = False  # nothing more to record, even if the target goes on
            raise TargetStopped(self.calls)

    def records(self, leaves: Sequence[Any] = ()) -> bool:
        """The one rule for what memscope records: a call (or an ahead-of-time
        stage) made while the capture is active, at the top level, on concrete
        values (the flat ``leaves``, where known). Anything else passes straight
        through to JAX with no work of memscope's (see
        :func:`memscope._compat.is_concrete_call`)."""
        return self.active and _compat.is_concrete_call(leaves)

    def lookup(self, key: Any) -> Entry | None:
        return self._by_key.get(key)

    def add(self, key: Any, entry: Entry) -> Entry:
        with self._lock:
            existing = self._by_key.setdefault(key, entry)
            if existing is entry:
                self.entries.append(entry)
            return existing

    def alias(self, key: Any, entry: Entry) -> None:
        """Find ``entry`` under ``key`` too (it is already one of the entries)."""
        with self._lock:
            self._by_key.setdefault(key, entry)

    def recording_warnings(self, *, emit: bool = True
                           ) -> contextlib.AbstractContextManager[list[str]]:
        return self._proxy.recording(emit=emit)


def live_arrays(exclude: Sequence[Any] = ()) -> LiveArrays | None:
    """``jax.live_arrays()`` in figures, the largest listed; ``None`` if unreadable.
    ``exclude``: arrays not to count (a failed call's outputs hold no memory)."""
    try:
        skip = {id(x) for x in exclude}
        arrays = [a for a in jax.live_arrays() if id(a) not in skip]
        largest = sorted(arrays, key=lambda a: a.nbytes, reverse=True)
        live = LiveArrays(
            count=len(arrays), total_bytes=sum(int(a.nbytes) for a in arrays),
            largest=tuple(LiveArray(tuple(a.shape), str(a.dtype), int(a.nbytes),
                                    describe_sharding(a.sharding))
                          for a in largest[:LARGEST_LIVE_ARRAYS]))
        del arrays, largest
        return live
    except Exception:
        return None


@contextlib.contextmanager
def capture(*, advise: bool | AdviceLevel = False, request: VariantRequest | None = None,
            stop_after: int | None = None, keep_calls: bool = False,
            stop_at_repeat: bool = False,
            remat_flops: float | None = None) -> Iterator[Session]:
    """Record every jitted function called inside the block.

    ``advise`` also compiles each signature with other donations: ``"advised"``
    the advisor's donation, ``"full"`` (or ``True``) also no donation and every
    array argument donated; ``"off"`` (or ``False``) none. Each distinct
    donation is one XLA compile, made in memscope's worker thread while the
    program goes on. ``request`` compiles the donation a ``memscope diff`` asked
    for. With advice on and ``remat_flops`` given (a fraction, e.g.
    :data:`memscope.remat.DEFAULT_MAX_FLOPS_INCREASE`), each function that
    differentiates is also traced again to list its residuals and compiled
    under each ``jax.checkpoint`` policy (:mod:`memscope.remat`); the policy
    advised saves the most peak within ``remat_flops`` more FLOPs. ``None``
    (the default) skips this: it costs about one compile per policy.
    ``stop_after`` ends the block's code with
    :class:`~memscope.errors.TargetStopped` once that many jitted calls ran;
    ``stop_at_repeat`` at the first call of a signature called before (a loop
    has begun). ``keep_calls`` keeps each signature's call in shapes
    (:class:`KeptCall`), to compile it again (``memscope fit``).

    Reading the compiled programs and the variants' compiles finish before the
    block exits. Jit objects made inside the block stay usable after it; they
    just stop recording.
    """
    if stop_after is not None and stop_after < 1:
        raise MemscopeError(f"stop_after must be at least 1, got {stop_after}")
    unsupported = _compat.support_problem()
    if unsupported is not None and not _compat.unsupported_allowed():
        raise MemscopeError(unsupported)
    with _compat.lowering_warnings() as proxy:
        session = Session(proxy, advise=advise, request=request, stop_after=stop_after,
                          remat_flops=remat_flops)
        with contextlib.suppress(Exception):  # compile times are then n/a
            session.clock.install()
        session.keep_calls, session.stop_at_repeat = keep_calls, stop_at_repeat

        def wrap(jitted: Any, fun: Callable[..., Any], options: dict[str, Any]) -> Any:
            if not _is_jax_internal(fun):
                return MeasuredJit(jitted, fun, session, options)
            # jax.pmap jits a function of its own around the user's: report it
            # under the user's name; its leaves keep pmap's flat names.
            user = _compat.pmap_user_function(fun)
            if user is None:
                return jitted
            return MeasuredJit(jitted, fun, session, options, named_after=user)

        def uncaptured_pmap() -> None:
            session.uncaptured_pmaps += 1

        try:
            with _compat.patched_make_jit(wrap), _compat.pmap_outside_jit(uncaptured_pmap):
                yield session
        finally:
            session.active = False
            session.clock.remove()
            session.finish()
            # Before the warnings proxy goes: the variants' lowerings record through it.
            session.wait()


class MeasuredJit:
    """A ``jax.jit`` object that also reports its calls to a :class:`Session`.

    Every attribute (``lower``, ``trace``, ``eval_shape``, ``clear_cache``,
    ``__wrapped__``, the function's own attributes) reads through to the jit
    object JAX made, so code that uses them behaves as without memscope.
    """

    def __init__(self, jitted: Any, fun: Callable[..., Any], session: Session,
                 options: dict[str, Any] | None = None, *,
                 named_after: Callable[..., Any] | None = None) -> None:
        self.__dict__.update(getattr(jitted, "__dict__", {}))
        self._memscope_jitted = jitted
        self._memscope_session = session
        self._memscope_spec = _compat.jit_spec(jitted)
        self._memscope_fun = fun
        # None for a jit made outside a capture (analyze()): its options are unknown
        self._memscope_options = None if options is None else dict(options)
        # The user's own spelling (JAX fills in the other from the signature).
        wrote_numbers = (options or {}).get("donate_argnums") is not None
        wrote_names = (options or {}).get("donate_argnames") is not None
        self._memscope_style: Style = ("argnums" if wrote_numbers and not wrote_names
                                       else "argnames")
        shown = named_after if named_after is not None else fun
        self._memscope_name, self._memscope_source = definition(shown)
        self._memscope_framework = wrappers.framework(fun)
        try:  # making the user's jit object must never fail for memscope's sake
            self._memscope_key: Any = keys.function_key(fun)
            self._memscope_identity: Any = keys.value_key(fun)
            self._memscope_library = (None if self._memscope_framework is not None
                                      else library(shown))
        except Exception:
            self._memscope_key, self._memscope_library = object(), None
            self._memscope_identity = object()
        self._memscope_seen: dict[Any, Entry] = {}
        # a library's own jit has no line of the user's to edit
        self._memscope_site = (_site(session) if self._memscope_library is None
                               else (None, None))

    def __getattr__(self, name: str) -> Any:
        # Only reached for names not set on the wrapper: the jit object's methods.
        try:
            jitted = self.__dict__["_memscope_jitted"]
        except KeyError:  # mid-construction (copy, pickle): nothing to forward to yet
            raise AttributeError(name) from None
        return getattr(jitted, name)

    def __get__(self, instance: Any, owner: Any = None) -> Any:
        # A jitted function stored on a class binds like a method, as jax.jit's does.
        return self if instance is None else types.MethodType(self, instance)

    def __repr__(self) -> str:
        return repr(self._memscope_jitted)

    def __copy__(self) -> MeasuredJit:
        return self._like(copy.copy(self._memscope_jitted))

    def __deepcopy__(self, memo: dict[int, Any]) -> MeasuredJit:
        return self._like(copy.deepcopy(self._memscope_jitted, memo))

    def __reduce__(self) -> Any:
        # Pickled as the jit object it stands for: where that pickles, this does,
        # and where it does not, the error is the same.
        return _as_is, (self._memscope_jitted,)

    def _like(self, jitted: Any) -> MeasuredJit:
        """A stand-in for a copy of the jit object, recording into the same session."""
        twin = object.__new__(MeasuredJit)
        twin.__dict__.update(self.__dict__, _memscope_jitted=jitted, _memscope_seen={})
        return twin

    def trace(self, *args: Any, **kwargs: Any) -> Any:
        """``jitted.trace``: JAX's ``Traced``, in a stand-in whose compiled calls count."""
        return self._stage(self._memscope_jitted.trace(*args, **kwargs), args, kwargs,
                           traced=True)

    def lower(self, *args: Any, **kwargs: Any) -> Any:
        """``jitted.lower``: JAX's ``Lowered``, in a stand-in whose compiled calls count."""
        return self._stage(self._memscope_jitted.lower(*args, **kwargs), args, kwargs)

    def _stage(self, real: Any, args: tuple[Any, ...], kwargs: dict[str, Any], *,
               traced: bool = False) -> Any:
        # JAX's own stage, untouched, unless its compiled form could run a
        # recorded call: staged inside another trace, or given tracers, it cannot.
        if not self._memscope_session.records(jax.tree_util.tree_leaves((args, kwargs))):
            return real
        from memscope import aot  # the ahead-of-time path, only when used

        try:
            call = aot.abstract_call(args, kwargs)
        except Exception:  # never let the measurement break the program
            return real
        return aot.Stage(real, self, call, traced=real if traced else None)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        __tracebackhide__ = True  # pytest: the user's frames only
        try:
            return self._measured_call(args, kwargs)
        except BaseException as e:
            # The user's traceback shows their call, not memscope's frames.
            e.with_traceback(_without_own_frames(e.__traceback__))
            raise

    def _measured_call(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        jitted = self._memscope_jitted
        session = self._memscope_session
        if not session.records():  # staged into a trace: JAX's alone
            return jitted(*args, **kwargs)
        try:
            key, leaves = self._call_key(args, kwargs)
        except Exception:
            # Unhashable static arguments and the like: JAX will say what is wrong.
            return jitted(*args, **kwargs)
        if not session.records(leaves):  # tracers at the top level
            return jitted(*args, **kwargs)
        session.settle()
        entry = self._memscope_seen.get(key)
        if entry is None:
            out, entry = self._first_call(key, leaves, args, kwargs)
        else:
            try:
                out = jitted(*args, **kwargs)
            except Exception as e:
                self._memscope_session.failed(entry, e)
                raise
            entry.calls += 1
            if entry.donated:  # after the call: only a call that ran donated anything
                session.ledger.record(entry, session.calls + 1, leaves, entry.donated,
                                      _NOT_USER)
        session.after_call(entry, out)
        session.count_call(repeat=entry.calls > 1)
        return out

    def _first_call(self, key: Any, leaves: Sequence[Any], args: tuple[Any, ...],
                    kwargs: dict[str, Any]) -> tuple[Any, Entry]:
        session = self._memscope_session
        # JAX keeps one executable per function object, options and signature:
        # the same function jitted again alike runs the program already read.
        same_function = (self._memscope_identity, self._memscope_spec.token, key)
        entry = session.lookup(same_function)
        if entry is not None:
            out = self._memscope_jitted(*args, **kwargs)
            self._merged(entry, key, leaves)
            return out, entry
        before = [_addresses(x) for x in leaves]
        donated = self._donation_check(leaves, before, args, kwargs)
        late = _any_pending(leaves)
        memory_before = session.device_memory()
        session.clock.start()
        try:
            with session.recording_warnings() as lowering_warnings:
                try:
                    out = self._memscope_jitted(*args, **kwargs)
                except Exception as e:
                    if oom.is_out_of_memory(str(e)):
                        self._failed_first_call(key, same_function, leaves, args, kwargs, e)
                    raise
        finally:
            compile_seconds = session.clock.stop()
        memory_after = session.device_memory()
        observation = _observe(before, leaves, out, late=late)
        handles, handles_error = None, None
        try:  # cache hits: what must be read while the call's arguments are at hand
            handles = take_compiled(self._memscope_jitted, args, kwargs)
        except Exception as e:  # never let the measurement break the program
            handles_error = f"could not read the compiled program: {type(e).__name__}: {e}"
        # Another function object of the same code (a jit made in a loop) is the
        # same entry only where XLA compiled the same program: globals and
        # constants it reads may differ (a fingerprint of a few microseconds).
        same_program = (self._memscope_key, self._memscope_spec.token, key,
                        None if handles is None
                        else _compat.executable_fingerprint(handles.compiled))
        entry = session.lookup(same_program)
        if entry is not None:
            session.alias(same_function, entry)
            self._merged(entry, key, leaves)
            return out, entry
        try:
            entry = self._entry(key, args, kwargs, out)
        except Exception as e:  # the user's call succeeded; memscope must not fail it
            entry = Entry(name=self._memscope_name, source=self._memscope_source,
                          signature="(?)", spec=self._memscope_spec,
                          error=f"could not describe the call: {type(e).__name__}: {e}")
        entry.library = self._memscope_library
        self.stamp(entry)
        entry.warnings = tuple(lowering_warnings)
        session.observed(entry, observation)
        entry.key, entry.compile_seconds, entry.donated = key, compile_seconds, donated
        entry.first_call = session.calls + 1
        if donated:
            session.ledger.record(entry, entry.first_call, leaves, donated, _NOT_USER)
        if memory_before is not None and memory_after is not None:
            entry.measured = MeasuredMemory(memory_before[0], *memory_after)
        shardings = [x.sharding if isinstance(x, jax.Array) else None for x in leaves]
        if handles_error is not None:
            entry.error = handles_error
        if session.keep_calls:
            entry.call = self._kept_call(args, kwargs)
        mine = entry
        entry = session.add(same_program, entry)
        session.alias(same_function, entry)
        if handles is not None and entry is mine:
            plan = self._remat_plan(args, kwargs)
            session.defer(functools.partial(self._analyse, entry, handles, shardings,
                                            _compat.config_snapshot(), plan))
        entry.calls += 1
        self._memscope_seen[key] = entry
        return out, entry

    def _merged(self, entry: Entry, key: Any, leaves: Sequence[Any]) -> None:
        """Count a first call of this jit object under ``entry``: the same program."""
        session = self._memscope_session
        if entry.donated:
            session.ledger.record(entry, session.calls + 1, leaves, entry.donated, _NOT_USER)
        entry.calls += 1
        self._memscope_seen[key] = entry

    def _donation_check(self, leaves: Sequence[Any], addresses: Sequence[Any],
                        args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[int, ...]:
        """The leaves this signature donates; first, any buffer donated twice, or
        donated and passed again, is named (JAX's own error comes at the call)."""
        spec = self._memscope_spec
        if not (spec.donate_argnums or spec.donate_argnames):
            return ()
        session = self._memscope_session
        try:
            arguments = _arguments(self._memscope_fun, spec, args, kwargs)
            donated = between.donated_leaves(arguments, spec)
            if len(leaves) != sum(len(a.leaves) for a in arguments):
                return ()
            session.ledger.check(
                self._memscope_name, self._memscope_source, session.calls + 1, leaves,
                addresses, donated, lambda: between.leaf_paths(
                    arguments, _argument_values(arguments, args, kwargs)), _NOT_USER)
        except Exception:  # never let the measurement break the program
            return ()
        return donated

    def _kept_call(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> KeptCall | None:
        from memscope import aot

        try:
            call_args, call_kwargs = aot.abstract_call(args, kwargs)
            return KeptCall(self._memscope_jitted, call_args, call_kwargs,
                            _arguments(self._memscope_fun, self._memscope_spec, args, kwargs))
        except Exception:  # memscope must not fail the call
            return None

    def _failed_first_call(self, key: Any, session_key: Any, leaves: Sequence[Any],
                           args: tuple[Any, ...], kwargs: dict[str, Any],
                           error: Exception) -> None:
        """Record a first call that ran out of memory, for the post-mortem: its
        compiled program is read later, off the program's path, from the call's
        shapes (an executable that failed to compile is compiled there again)."""
        session = self._memscope_session
        try:
            entry = self._entry(key, args, kwargs, None)
        except Exception:
            entry = Entry(name=self._memscope_name, source=self._memscope_source,
                          signature=_signature_text(key), spec=self._memscope_spec)
        entry.library = self._memscope_library
        try:
            # Only the failed executable's cache tells a compile from a run.
            handles = take_compiled(self._memscope_jitted, args, kwargs)
            where = "call"
        except Exception:
            handles, where = None, "compile"
        session.failed(entry, error, where)
        entry.call = self._kept_call(args, kwargs)
        if session.add(session_key, entry) is not entry:
            return
        self._memscope_seen[key] = entry
        if handles is not None:
            shardings = [x.sharding if isinstance(x, jax.Array) else None for x in leaves]
            session.defer(functools.partial(self._analyse, entry, handles, shardings,
                                            _compat.config_snapshot()))

    def stamp(self, entry: Entry) -> None:
        """Record on ``entry`` where the jit was made and where this call came from."""
        entry.jit_site, entry.jit_file_sha256 = self._memscope_site
        where = sites.user_frame(_NOT_USER)
        entry.call_site = _site_text(where) if where is not None else None

    def _analyse(self, entry: Entry, handles: CompiledHandles, shardings: list[Any],
                 settings: _compat.ConfigSnapshot, plan: remat.Plan | None = None) -> None:
        """Read the compiled program, then compile the variants (in the worker
        thread, under the JAX settings the call ran with)."""
        session = self._memscope_session
        with contextlib.suppress(Exception):
            texts = tuple(describe_sharding(s) for s in shardings)
            session.publish(lambda: setattr(entry, "shardings", texts))
        try:
            with _compat.applied_config(settings):
                facts = wrappers.renamed(entry.wrapper,
                                         read_handles(handles, shardings=shardings))
                session.publish(lambda: setattr(entry, "facts", facts))
                if facts is not None and (session.advice != "off" or session.request) \
                        and entry.library is None:
                    variants = self._variants(entry, facts, handles.traced, shardings)
                    session.publish(lambda: setattr(entry, "variants", variants))
                if facts is not None and plan is not None and entry.library is None:
                    found = self._remat(entry, facts, handles, plan, settings)
                    session.publish(lambda: setattr(entry, "remat", found))
        except Exception as e:  # never let the measurement break the program
            error = f"could not read the compiled program: {type(e).__name__}: {e}"
            session.publish(lambda: setattr(entry, "error", error))

    def _remat_plan(self, args: tuple[Any, ...], kwargs: dict[str, Any]
                    ) -> remat.Plan | None:
        """What the rematerialization analysis needs of this call (its arrays as
        shapes), when the session asks for advice on the user's own function."""
        session = self._memscope_session
        if (not session.remat or self._memscope_library is not None
                or self._memscope_options is None):
            return None
        try:
            return remat.Plan(self._memscope_fun, self._memscope_options,
                              remat.abstract((args, kwargs)), session.remat_flops)
        except Exception:  # the user's call succeeded; memscope must not fail it
            return None

    def _remat(self, entry: Entry, facts: CompiledFacts, handles: CompiledHandles,
               plan: remat.Plan, settings: _compat.ConfigSnapshot) -> Remat | None:
        """Residuals and checkpoint policies, measured (see :mod:`memscope.remat`);
        compiles at the lowest priority while the program runs, as variants do."""
        session = self._memscope_session
        if not _compat.transposes(handles.traced.jaxpr):
            return None  # no grad or vjp: nothing to trace again for
        written = RematVariant("as_written", facts.memory.peak_bytes,
                               _compat.flops(handles.compiled))
        fix = next((v for v in entry.variants if v.name == "advised" and v.facts is not None
                    and not v.same_as_written), None)
        donation = (fix.setting, fix.facts.program.donated) if fix and fix.facts else None

        def compile_in(thunk: Callable[[], Any]) -> Any:
            def run() -> Any:
                with _compat.applied_config(settings):
                    return thunk()
            if session.worker.draining:
                return run()
            return session.worker.compiler.submit(run).result()

        try:
            # JAX's lowering warnings for programs the user never runs are not the user's.
            with session.recording_warnings(emit=False):
                result = remat.analyse(plan, written, compile_in=compile_in,
                                       donation=donation,
                                       cancelled=lambda: session.worker.cancelled)
        except Exception as e:  # the trace again failed: say so, keep the rest
            return Remat(differentiations=(), error=f"{type(e).__name__}: {e}")
        if result is not None:
            session.count_variants(compiled=len(result.variants) - 1
                                   + (result.advice is not None and result.advice.combined),
                                   reused=0)
        return result

    def _entry(self, key: Any, args: tuple[Any, ...], kwargs: dict[str, Any],
               out: Any) -> Entry:
        """A new entry for the first call of a signature, in the user's terms when a
        framework's wrapper made the jit (see :mod:`memscope.wrappers`)."""
        fun, spec = self._memscope_fun, self._memscope_spec

        def jax_arguments() -> tuple[Argument, ...]:
            return _arguments(fun, spec, args, kwargs)

        wrapped = None
        if self._memscope_framework is not None:
            wrapped = wrappers.describe(self._memscope_framework, fun, args, kwargs, out,
                                        style=self._memscope_style,
                                        jax_arguments=jax_arguments)
        if wrapped is None:
            return Entry(name=self._memscope_name, source=self._memscope_source,
                         signature=_signature_text(key), spec=spec,
                         style=self._memscope_style, arguments=jax_arguments())
        name, source = definition(wrapped.function)
        if wrapped.donated_positions is not None:
            # Equinox donates in its own terms; say which user arguments that covers.
            spec = dataclasses.replace(spec, static_argnums=(), static_argnames=(),
                                       donate_argnums=wrapped.donated_positions,
                                       donate_argnames=wrapped.donated_names or ())
        return Entry(name=name, source=source, signature=wrapped.signature or _signature_text(key),
                     spec=spec, style=wrapped.style, wrapper=wrapped,
                     arguments=(wrapped.arguments if wrapped.arguments is not None
                                else jax_arguments()))

    def _variants(self, entry: Entry, facts: CompiledFacts, traced: Any,
                  shardings: list[Any]) -> list[VariantFacts]:
        """Compile the donation variants the session asks for: one compile per
        donation that is neither the program's own nor an earlier variant's."""
        arguments = entry.arguments
        if sum(len(a.leaves) for a in arguments) != len(facts.program.inputs):
            return [VariantFacts("none", "n/a", None, error="the call's arguments do not "
                                 "line up with the compiled program's; no variants")]
        plan, done, note = self._plan(entry, facts)
        session = self._memscope_session
        pending: list[tuple[VariantFacts, LoweredVariant]] = []
        first: dict[tuple[bool, ...], VariantName] = {}
        shared: list[VariantFacts] = []
        for name, donation in plan:
            if session.worker.cancelled:
                return []  # the report is being built without them
            ready, mask = self._describe(entry, facts, name, donation)
            if mask == facts.program.donated:
                done.append(ready)
            elif mask in first:
                shared.append(replace(ready, same_as=first[mask]))
            else:
                first[mask] = name
                lowered, ready = self._lower_variant(ready, mask, traced)
                if lowered is None:
                    done.append(ready)
                else:
                    pending.append((ready, lowered))
        done += self._compile(entry, pending, shardings)
        by_name = {v.name: v for v in done}
        done += [replace(v, facts=by_name[v.same_as].facts, warnings=by_name[v.same_as].warnings,
                         error=by_name[v.same_as].error)
                 for v in shared if v.same_as is not None]
        session.count_variants(compiled=len(pending), reused=sum(
            v.same_as_written or v.same_as is not None for v in done))
        order = [name for name, _ in plan]
        done.sort(key=lambda v: order.index(v.name) if v.name in order else -1)
        done = [replace(v, note=note) if v.name == "advised" else v for v in done]
        return self._consistent_advice(entry, facts, done, traced, shardings)

    def _compile(self, entry: Entry, pending: list[tuple[VariantFacts, LoweredVariant]],
                 shardings: list[Any]) -> list[VariantFacts]:
        """Compile the lowered variants: one at a time at the lowest priority while
        the program runs; side by side at the usual priority once it has ended and
        the report waits for them."""
        session = self._memscope_session
        ended = session.worker.draining
        results = compile_variants([lowered for _, lowered in pending], shardings=shardings,
                                   workers=None if ended else 1,
                                   pool=None if ended else session.worker.compiler,
                                   settings=_compat.config_snapshot())
        done = []
        for (ready, _), result in zip(pending, results, strict=True):
            if isinstance(result, Exception):
                done.append(replace(ready, error=f"could not compile with {ready.setting}: "
                                                 f"{type(result).__name__}: {result}"))
            else:
                done.append(replace(ready, facts=wrappers.renamed(entry.wrapper, result)))
        return done

    def _plan(self, entry: Entry, facts: CompiledFacts
              ) -> tuple[list[tuple[VariantName, Donation]], list[VariantFacts], str | None]:
        """The donations to measure, the variants already answered (a request that
        cannot be applied), and the note on the advised setting."""
        session = self._memscope_session
        arguments = entry.arguments
        plan: list[tuple[VariantName, Donation]] = []
        done: list[VariantFacts] = []
        note = None
        if session.advice == "full":
            plan += [("none", donate_none()), ("all", donate_all(arguments))]
        if session.advice != "off":
            inputs, outputs = classify(facts.program, entry.warnings)
            chosen = advice.candidates(inputs, outputs)
            if chosen:  # no candidate: the advice is known without a compile
                written = as_written(arguments, facts.program.donated)
                wanted = advised(arguments, written, chosen)
                fix = wanted.closest(arguments, entry.style)
                plan.append(("advised", fix))
                note = wider_note(fix, wanted, arguments, entry.style)
        request = session.request
        if request is not None and (request.functions is None
                                    or entry.name in request.functions):
            try:
                plan.append(("requested", resolve_spec(
                    request.spec, arguments, function=entry.name,
                    parameters=(entry.wrapper.parameters
                                if entry.wrapper is not None and entry.wrapper.parameters
                                else _parameter_names(self._memscope_fun)),
                    static={*entry.spec.static_argnums, *entry.spec.static_argnames})))
            except MemscopeError as e:
                done.append(VariantFacts("requested", request.spec.text, None, error=str(e)))
        return plan, done, note

    def _consistent_advice(self, entry: Entry, facts: CompiledFacts,
                           variants: list[VariantFacts], traced: Any, shardings: list[Any]
                           ) -> list[VariantFacts]:
        """The variants, the advised one never donating an argument that its own
        compile shows ``unusable``: such arguments are left out and the rest
        compiled again, or, where the spelling cannot leave them out (Equinox),
        kept with a note saying so."""
        at = next((i for i, v in enumerate(variants) if v.name == "advised"), None)
        if at is None or variants[at].facts is None:
            return variants
        fixed = variants[at]
        assert fixed.facts is not None
        arguments, style = entry.arguments, entry.style
        written = as_written(arguments, facts.program.donated)
        inputs, _ = classify(fixed.facts.program, fixed.warnings)
        mask = fixed.facts.program.donated
        donated = Donation(frozenset(i for i, a in enumerate(arguments)
                                     if any(mask[leaf] for leaf in a.leaves)))
        bad = sorted(i for i in donated.arguments - written.arguments
                     if any(inputs[leaf].fate == "unusable" for leaf in arguments[i].leaves))
        if not bad:
            return variants
        unusable = [inputs[leaf].path for i in bad for leaf in arguments[i].leaves
                    if inputs[leaf].fate == "unusable"]
        leaves, labels = ", ".join(unusable), ", ".join(arguments[i].label for i in bad)
        one = len(unusable) == 1
        rest = Donation(donated.arguments - frozenset(bad))
        refix = rest.closest(arguments, style)
        if refix.arguments & frozenset(bad):
            why = (f"{leaves} stay{'s' if one else ''} unusable (no output can take "
                   f"{'it' if one else 'them'}): {fixed.setting} cannot leave out {labels}.")
            variants[at] = replace(fixed, note=f"{fixed.note} {why}" if fixed.note else why)
            return variants
        dropped = (f"The advice leaves out {labels}: donating {'it' if len(bad) == 1 else 'them'}"
                   f" leaves {leaves} unusable (no output can take the buffer).")
        if refix.arguments == written.arguments:
            return [v for v in variants if v.name != "advised"]
        ready, refix_mask = self._describe(entry, facts, "advised", refix)
        lowered, ready = self._lower_variant(ready, refix_mask, traced)
        if lowered is not None:
            (ready,) = self._compile(entry, [(ready, lowered)], shardings)
            self._memscope_session.count_variants(compiled=1, reused=0)
        wider = wider_note(refix, rest, arguments, style)
        variants[at] = replace(ready, note=f"{dropped} {wider}" if wider else dropped)
        return self._consistent_advice(entry, facts, variants, traced, shardings)

    def _describe(self, entry: Entry, facts: CompiledFacts, name: VariantName,
                  donation: Donation) -> tuple[VariantFacts, tuple[bool, ...]]:
        """The variant's record, and the flat leaves its donation donates."""
        mask = tuple(donation.leaf_mask(entry.arguments, len(facts.program.inputs)))
        setting = donation.setting(entry.arguments, entry.style)
        written = as_written(entry.arguments, facts.program.donated)
        added = tuple(entry.arguments[i].label
                      for i in sorted(donation.arguments - written.arguments))
        if mask == facts.program.donated:
            return VariantFacts(name, setting, facts, entry.warnings, same_as_written=True,
                                added=added), mask
        return VariantFacts(name, setting, None, added=added), mask

    def _lower_variant(self, ready: VariantFacts, mask: tuple[bool, ...],
                       traced: Any) -> tuple[LoweredVariant | None, VariantFacts]:
        """The variant lowered (``None`` if it could not be) and its record."""
        # JAX's warnings for a program the user never runs are not the user's.
        with self._memscope_session.recording_warnings(emit=False) as lowering_warnings:
            try:
                lowered = lower_variant(traced, mask)
            except Exception as e:
                return None, replace(ready, error=f"could not lower with {ready.setting}: "
                                                  f"{type(e).__name__}: {e}")
        return lowered, replace(ready, warnings=tuple(lowering_warnings))

    def _call_key(self, args: tuple[Any, ...], kwargs: dict[str, Any]
                  ) -> tuple[Any, list[Any]]:
        """What JAX keys this call's executable on (see :mod:`memscope.keys`), and
        the call's flat dynamic leaves."""
        spec = self._memscope_spec
        positional: tuple[Any, ...] = ()
        named: tuple[Any, ...] = ()
        if spec.static_argnums or spec.static_argnames:
            n = len(args)
            positions = {i % n for i in spec.static_argnums if -n <= i < n}
            positional = tuple((i, keys.StaticKey(args[i])) for i in sorted(positions))
            named = tuple(sorted((k, keys.StaticKey(v)) for k, v in kwargs.items()
                                 if k in spec.static_argnames))
            args = tuple(a for i, a in enumerate(args) if i not in positions)
            kwargs = {k: v for k, v in kwargs.items() if k not in spec.static_argnames}
        leaves, treedef = jax.tree_util.tree_flatten((args, kwargs))
        key = (positional, named, treedef, tuple(keys.leaf_key(x) for x in leaves))
        hash(key)
        return key, leaves


def _arguments(fun: Any, spec: _compat.JitSpec, args: tuple[Any, ...],
               kwargs: dict[str, Any]) -> tuple[Argument, ...]:
    """The call's dynamic top-level arguments, each with its flat leaves in JAX's order
    (positional arguments, then keyword arguments sorted by name)."""
    params = _parameters(fun)
    n = len(args)
    static = {i % n for i in spec.static_argnums if -n <= i < n}
    result = []
    start = 0

    def add(value: Any, position: int | None, name: str | None, by_name: bool) -> None:
        nonlocal start
        leaves = jax.tree_util.tree_leaves(value)
        result.append(Argument(position=position, name=name, by_name=by_name,
                               leaves=tuple(range(start, start + len(leaves))),
                               has_arrays=any(isinstance(x, jax.Array | np.ndarray
                                                         | jax.ShapeDtypeStruct)
                                              for x in leaves)))
        start += len(leaves)

    positional = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    for i, value in enumerate(args):
        if i in static:
            continue
        p = params[i] if params is not None and i < len(params) else None
        named = p is not None and p.kind in positional
        add(value, i, p.name if p is not None and named else None,
            p is not None and p.kind == inspect.Parameter.POSITIONAL_OR_KEYWORD)
    for name in sorted(kwargs):
        if name not in spec.static_argnames:
            add(kwargs[name], None, name, True)
    return tuple(result)


def _argument_values(arguments: Sequence[Argument], args: tuple[Any, ...],
                     kwargs: dict[str, Any]) -> list[Any]:
    return [args[a.position] if a.position is not None else kwargs[a.name or ""]
            for a in arguments]


def _parameters(fun: Any) -> list[inspect.Parameter] | None:
    try:
        return list(inspect.signature(fun).parameters.values())
    except (TypeError, ValueError):
        return None


def _parameter_names(fun: Any) -> tuple[str, ...] | None:
    params = _parameters(fun)
    if params is None:
        return None
    variadic = (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD)
    return tuple(p.name for p in params if p.kind not in variadic)


@dataclass(frozen=True)
class _Failed:
    """A call's computation failed: its error, and its outputs (they hold the error)."""

    error: Exception
    outputs: tuple[Any, ...] = ()


@dataclass(frozen=True)
class Unread:
    """A first call whose outputs' addresses cannot be read yet: it was made while
    an input was pending, so on CPU its outputs may have no buffer until it runs
    (see :func:`memscope._compat.allocated_late`). Weak references only."""

    inputs_before: tuple[Addresses, ...]
    inputs_deleted: tuple[bool | None, ...]
    outputs: tuple[weakref.ref[Any] | None, ...]

    def read(self, *, final: bool) -> Observation | _Failed | None:
        """The observation once every output is ready (``final``: waits); the
        error the call ended in; ``None`` when it cannot be known (an output
        already freed, or not ready yet and not ``final``)."""
        arrays = [ref() if ref is not None else None for ref in self.outputs]
        if any(ref is not None and a is None for ref, a in zip(self.outputs, arrays,
                                                               strict=True)):
            return None  # freed before memscope could look; the check is skipped
        live = [a for a in arrays if a is not None and not a.is_deleted()]
        if not final and not all(_compat.is_ready(a) for a in live):
            return None
        failure = next((f for a in live if (f := _compat.buffer_failure(a, wait=True))), None)
        if failure is not None:
            return _Failed(failure, tuple(live))
        return Observation(self.inputs_before, self.inputs_deleted,
                           tuple(_addresses(a) for a in arrays))


def _observe(before: list[Addresses], leaves: Sequence[Any], out: Any, *, late: bool
             ) -> Observation | Unread | _Failed:
    """The call's buffers as integers; :class:`Unread` when its outputs may not
    exist yet; the error its computation ended in, when that is known already
    (its outputs hold it, for the program to meet)."""
    outputs = jax.tree_util.tree_leaves(out)
    arrays = [y for y in outputs if isinstance(y, jax.Array) and not y.is_deleted()]
    deleted = tuple(x.is_deleted() if isinstance(x, jax.Array) else None for x in leaves)
    if late and any(_compat.allocated_late(y) for y in arrays):
        return Unread(tuple(before), deleted,
                      tuple(weakref.ref(y) if isinstance(y, jax.Array) else None
                            for y in outputs))
    failure = next((f for y in arrays if (f := _compat.buffer_failure(y))), None)
    if failure is not None:
        return _Failed(failure, tuple(arrays))
    return Observation(tuple(before), deleted, tuple(_addresses(y) for y in outputs))


def _any_pending(leaves: Sequence[Any]) -> bool:
    return any(isinstance(x, jax.Array) and not x.is_deleted() and not _compat.is_ready(x)
               for x in leaves)


def _addresses(x: Any) -> Addresses:
    """The device address of each addressable shard of ``x``, as integers."""
    if not isinstance(x, jax.Array) or x.is_deleted() or _compat.buffer_failure(x, wait=False):
        return None  # a failed computation's array has no buffer to read (see _compat)
    try:
        return tuple(shard.data.unsafe_buffer_pointer() for shard in x.addressable_shards)
    except Exception:  # a backend without raw addresses
        return None


def _signature_text(key: Any) -> str:
    """``(float32[4,8], int, #1=3, lr=0.1)``: what distinguishes one signature, in
    names that are the same in every run (no memory addresses)."""
    positional, named, _, leaf_keys = key
    parts = [keys.leaf_text(k) for k in leaf_keys]
    parts += [f"#{i}={static.name()}" for i, static in positional]
    parts += [f"{k}={static.name()}" for k, static in named]
    return f"({', '.join(parts)})"


def _as_is(value: Any) -> Any:
    return value


_OWN_FILES = os.path.dirname(os.path.abspath(__file__)) + os.sep


def _without_own_frames(tb: types.TracebackType | None) -> types.TracebackType | None:
    """``tb`` less memscope's own frames (python shows none of its machinery either)."""
    kept = []
    while tb is not None:
        if not tb.tb_frame.f_code.co_filename.startswith(_OWN_FILES):
            kept.append(tb)
        tb = tb.tb_next
    result = None
    for entry in reversed(kept):
        result = types.TracebackType(result, entry.tb_frame, entry.tb_lasti, entry.tb_lineno)
    return result


_INSTALLED = sites.installed_roots()
#: Frames that are not the user's: memscope's own and installed packages'.
_NOT_USER = (_OWN_FILES, *_INSTALLED)


def output_label(entry: Any, index: int) -> str:
    """``train_step result[1]``: output leaf ``index`` of ``entry``'s calls."""
    facts = getattr(entry, "facts", None)
    outputs = facts.program.outputs if facts is not None else ()
    path = outputs[index].path if index < len(outputs) else f"output leaf {index}"
    return f"{getattr(entry, 'name', '?')} {path}"


def library(fun: Any) -> str | None:
    """The installed package (``optax``) that defines ``fun``; ``None`` for the
    user's own code. Its jits are the library's: reported, never given advice
    the user cannot apply."""
    code = getattr(inspect.unwrap(_base_function(fun)), "__code__", None)
    if code is None:
        return None
    path = os.path.realpath(code.co_filename)
    for root in _INSTALLED:
        if path.startswith(root):
            return path[len(root):].split(os.sep)[0].removesuffix(".py")
    return None


def _base_function(fun: Any) -> Any:
    while isinstance(fun, functools.partial):
        fun = fun.func
    return fun


def _is_jax_internal(fun: Any) -> bool:
    module = getattr(_base_function(fun), "__module__", None) or ""
    return module.split(".")[0] in _compat.JAX_PACKAGES


def definition(fun: Any) -> tuple[str, str | None]:
    """The user's name for ``fun`` and where it is defined, as ``path:line``.

    The line is the ``def`` line, not a decorator's; the path is relative to the
    working directory when under it.
    """
    base = inspect.unwrap(_base_function(fun))
    name = getattr(base, "__name__", None) or type(base).__name__
    code = getattr(base, "__code__", None)
    if code is None:
        return name, None
    path, line = code.co_filename, code.co_firstlineno
    if linecache.getline(path, line).lstrip().startswith("@"):
        for candidate in range(line + 1, line + 50):  # skip decorators to the def line
            text = linecache.getline(path, candidate).lstrip()
            if text.startswith(("def ", "async def ")):
                line = candidate
                break
    return name, f"{display_path(path)}:{line}"


def _site(session: Session) -> tuple[str | None, str | None]:
    """``(path:line, file SHA-256)`` of the user's code making a jit now."""
    try:
        where = sites.user_frame(_NOT_USER)
        if where is None:
            return None, None
        return _site_text(where), sites.file_sha256(where[0], session.file_hashes)
    except Exception:  # making the user's jit object must never fail for memscope's sake
        return None, None


def _site_text(where: tuple[str, int]) -> str:
    return f"{display_path(where[0])}:{where[1]}"


def display_path(path: str) -> str:
    """``path`` relative to the working directory when it lies under it."""
    try:
        rel = os.path.relpath(path)
    except ValueError:
        return path
    return path if rel.startswith(os.pardir) else rel
