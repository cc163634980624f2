"""The entries of one capture, and what the run showed between and after calls.

A :class:`Session` keeps the entries in the order their first call happened,
counts top-level calls (and ends the target at ``stop_after``), samples device
memory and live arrays after calls, and runs memscope's own work in its worker,
off the program's path. It is also the host that the variants it schedules
report to (:class:`memscope.variants.donations.Host`).
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import jax

from memscope import _compat
from memscope.analysis import oom
from memscope.analysis.advice import AdviceLevel, advice_level
from memscope.analysis.observed import Observation, misses
from memscope.capturing import between, residency
from memscope.capturing.entry import Entry
from memscope.capturing.hold import CLEARED, ENDED, Hold
from memscope.capturing.observe import Failed, at_end
from memscope.capturing.worker import Worker
from memscope.compiled.cache import CompileCache
from memscope.compiled.read import (
    describe_sharding,
)
from memscope.compiled.targets.base import Target
from memscope.compiled.targets.here import HereTarget
from memscope.errors import MemscopeError, ProgramStopped
from memscope.progress import SILENT, ProgressStep, Reporter
from memscope.report import (
    Device,
    Environment,
    LiveArray,
    LiveArrays,
    MemorySample,
    Overhead,
    Runtime,
)
from memscope.variants import remat
from memscope.variants.donation import VariantRequest

#: Device-memory samples kept per run (one per top-level call); later calls are
#: not sampled, and the report says the timeline was cut.
MAX_SAMPLES = 10_000
#: Live arrays listed by size at the end of a run.
LARGEST_LIVE_ARRAYS = 10
#: Signatures that get the advised compile whatever their size; after them,
#: only those with a compiled peak of at least ADVICE_MIN_PEAK.
ADVICE_FOR_EVERY = 50
ADVICE_MIN_PEAK = 1 << 20
#: first calls that may begin their advised variant early (a run's
#: large functions come first: a model's init, its step, its evaluation), and
#: first calls traced to see whether they may (see Session.early_allowed)
EARLY_FOR_FIRST = 4
EARLY_TRACES = 16


class Session:
    """The entries of one capture, in the order their first call happened."""

    def __init__(self, proxy: Any, *, advise: bool | AdviceLevel = False,
                 request: VariantRequest | None = None,
                 stop_after: int | None = None,
                 remat_flops: float | None = None, target: Target | None = None) -> None:
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
        #: what the functions are compiled for: this machine, or a ``--target``
        #: accelerator (compiled for too, its figures the functions')
        self.target: Target = target if target is not None else HereTarget()
        #: the compiles memscope reads kept across runs (:mod:`memscope.compiled.cache`)
        self.cache: CompileCache | None = CompileCache.from_environment()
        #: keep each entry's call in shapes (``memscope fit`` compiles it again)
        self.keep_calls = False
        #: end the target at a repeat: of any signature (``True``), or of the
        #: named function's only (a name: ``memscope fit --function NAME``)
        self.stop_at_repeat: bool | str = False
        #: end the target once the function of this name has run its first call
        #: (``memscope bisect --function NAME``: what it needs is compiled then)
        self.stop_at_function: str | None = None
        #: hears where the compiles stand while :meth:`wait` waits for them
        self.progress: Reporter = SILENT
        self._stop_hit = False
        self.calls = 0
        self._proxy = proxy
        self._lock = threading.Lock()
        self._by_key: dict[Any, Entry] = {}
        self._stats_available: bool | None = None  # asked at the first call, not before
        self._samples: list[MemorySample] = []
        self._truncated = False
        self._live: LiveArrays | None = None
        self._finished = False
        #: compile time, live arrays over the run, donated buffers (:mod:`memscope.capturing.between`)
        self.clock = between.CompileClock()
        self.live_sampler = residency.RunSampler()
        self.ledger = between.DonationLedger()
        #: memscope's work off the program's path (see :mod:`memscope.capturing.worker`)
        self.worker = Worker()
        self._waited: float | None = None
        self._after_end: list[Callable[[], None]] = []
        #: what the pending work holds of the program, let go at the end at the latest
        self._holds: list[Hold] = []
        self.variant_compiles = 0
        self.variants_reused = 0
        #: the program's functions compiled again with XLA's dump to read their
        #: buffer assignment (XLA:GPU), and those whose dump a run kept before
        self.dumps: Counter[str] = Counter()
        #: signatures given an advised compile, and those refused one (many functions)
        self.advice_given = 0
        self.advice_skipped = 0
        #: advised variants begun early (memscope.variants.early), and those left unused
        self.early_compiles = 0
        self.early_unused = 0
        self.early_traced = 0
        #: compiles of ``jax.pmap`` that ran outside ``jax.jit`` (JAX 0.7), unseen
        self.uncaptured_pmaps = 0
        #: the SHA-256 of each file a jit was made in (read once per run)
        self.file_hashes: dict[str, str | None] = {}
        #: the JAX and devices the figures were taken on, recorded at the capture's
        #: end (None: the target started no device, and memscope started none)
        self.environment: Environment | None = None

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
        self._prepare_for_target()
        if not _compat.backends_initialized():
            return  # the target used no device; do not start one now
        self.environment = describe_environment()
        with contextlib.suppress(Exception):
            self.live_sampler.at_end(self.calls)
        self._live = live_arrays()
        # After the live arrays: reading an address makes JAX before 0.10 keep a
        # per-device view of the buffer, which jax.live_arrays() would count.
        self._refs_at_end()

    def _prepare_for_target(self) -> None:
        """Lower, for the ``--target``, each call's own program the reading has
        not come to yet, while the arrays its function closes over still exist:
        as the program ends it lets go of them (its namespace, its functions),
        and memscope holds them no longer than it does
        (:meth:`memscope.capturing.hold.Hold.prepare`). The lowerings hold none
        of them."""
        with self._lock:
            holds = list(self._holds)
        for hold in holds:
            with contextlib.suppress(Exception):  # the reading then says why not
                hold.prepared()

    def _refs_at_end(self) -> None:
        """Each first call's Refs, read again now that the run has ended."""
        for entry in self.entries:
            seen = entry.observation
            if seen is None or not (entry.watched_refs or entry.watched_closed):
                continue
            with contextlib.suppress(Exception):  # a report without it says n/a
                entry.observation = at_end(seen, entry.watched_refs, entry.watched_closed)
            entry.watched_refs = entry.watched_closed = ()

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

    def before_call(self, leaves: Sequence[Any], new_signature: bool
                    ) -> residency.Pending | None:
        """Live arrays just before a top-level call, when one is due (see
        :mod:`memscope.capturing.residency`)."""
        try:  # never break the program for a sample
            return self.live_sampler.before_call(self.calls + 1, leaves, new_signature)
        except Exception:
            return None

    def after_call(self, entry: Entry, out: Any, pending: residency.Pending | None = None,
                   *, failed: bool = False) -> None:
        """Device memory after a top-level call (before it is counted), and the
        call in the run's log."""
        if not failed:
            self.sample(entry.name)
        if pending is None:
            return
        with contextlib.suppress(Exception):  # never break the program for a sample
            if entry.output_tops is None and not failed:
                entry.output_tops, entry.output_shapes = residency.output_tops(out)
                self.live_sampler.compile_seconds += entry.compile_seconds or 0.0
            self.live_sampler.after_call(pending, entry, out, failed=failed)

    def defer(self, job: Callable[[], None]) -> None:
        """Run ``job`` off the program's path, before the capture ends."""
        self.worker.submit(job)

    def defer_to_end(self, job: Callable[[], None]) -> None:
        """Run ``job`` once the program has ended (it runs code of the program's
        own, which the program must not see run again); at once if it has."""
        with self._lock:
            if not self.worker.draining:
                self._after_end.append(job)
                return
        job()

    def _report_progress(self) -> None:
        """Tell :attr:`progress` what is compiling for the target now, if anything."""
        now = self.target.progress()
        if now.left:
            names = ", ".join(what for what, _ in now.running) or "the next"
            self.progress(ProgressStep(f"compiling {names} for {now.target}", now.done,
                               now.done + now.left))

    def wait(self) -> None:
        """Wait for the deferred work: the program has ended, the report needs it.

        Ctrl-C while waiting drops the work not done yet: its entries say so in
        ``error``, and the report is built from the rest.
        """
        if self._waited is not None:
            return
        start = time.perf_counter()
        try:
            self._waited = (self.worker.wait(tick=self._report_progress)
                            if self.worker.started else 0.0)
            with self._lock:  # the program has ended: what had to wait for that
                after_end, self._after_end = self._after_end, []
            for job in after_end:
                self.worker.submit(job)
            if after_end:
                self._waited += self.worker.wait(tick=self._report_progress)
        except KeyboardInterrupt:
            self._waited = time.perf_counter() - start
            with self._lock:  # after the cancel: no result is published any more
                for entry in self.entries:
                    if entry.facts is None and entry.error is None:
                        entry.error = ("not read: memscope's analysis was interrupted "
                                       "after the program ended")
        finally:
            self.worker.close()
            with self._lock:
                holds, self._holds = self._holds, []
            for hold in holds:  # nothing of the program outlives the capture
                hold.release(ENDED)

    def keep(self, hold: Hold) -> None:
        """Remember ``hold``, to let go of what it still holds when the capture ends."""
        with self._lock:
            self._holds.append(hold)

    def let_go(self, entries: Iterable[Entry]) -> None:
        """The program cleared the cache of the jit object these entries belong to:
        let go of what memscope holds for them (its executables and traced
        programs), waiting only for a reading in progress."""
        for entry in entries:
            if entry.hold is not None:
                entry.hold.release(CLEARED, wait=True)

    def publish(self, apply: Callable[[], None]) -> None:
        """Apply deferred results to the entries, unless the wait was abandoned
        (the report may then be being built from them)."""
        with self._lock:
            if not self.worker.cancelled:
                apply()

    def count_dump(self, how: str | None) -> None:
        """Count how a function's buffer assignment was read from XLA's dump
        (:attr:`memscope.compiled.read.CompiledFacts.dumped`)."""
        if how is not None:
            with self._lock:
                self.dumps[how] += 1

    def count_variants(self, *, compiled: int, reused: int) -> None:
        """Count the variants compiled, and those answered without a compile."""
        with self._lock:
            self.variant_compiles += compiled
            self.variants_reused += reused

    def early_allowed(self) -> bool:
        """Whether a first call may be traced before JAX's call, to begin its
        advised variant early (:mod:`memscope.variants.early`): with
        the advice on, no variant asked for
        beside it, among the first :data:`EARLY_TRACES` first calls large
        enough, until :data:`EARLY_FOR_FIRST` have begun one. JAX's call reuses
        that trace; only a call whose trace fails is traced again by JAX (to
        raise its error), so a run of many small tests stops trying early."""
        with self._lock:
            return (self.advice != "off" and self.request is None
                    and self.early_compiles < EARLY_FOR_FIRST
                    and self.early_traced < EARLY_TRACES
                    and self.advice_given < ADVICE_FOR_EVERY)

    def count_early(self, *, traced: bool = False, wasted: bool = False) -> None:
        """Count a first call traced early, an early compile begun, or one left unused."""
        with self._lock:
            if traced:
                self.early_traced += 1
            elif wasted:
                self.early_unused += 1
            else:
                self.early_compiles += 1

    def advice_allowed(self, peak: int | None) -> bool:
        """The first :data:`ADVICE_FOR_EVERY` signatures get their advised compile;
        after them only those whose peak is at least :data:`ADVICE_MIN_PEAK`
        (a test suite, a sweep: thousands of small functions cost what one does)."""
        with self._lock:
            if self.advice_given < ADVICE_FOR_EVERY or (peak or 0) >= ADVICE_MIN_PEAK:
                self.advice_given += 1
                return True
            self.advice_skipped += 1
            return False

    @property
    def cache_hits(self) -> int:
        """The variants read from the cache instead of compiled."""
        return 0 if self.cache is None else self.cache.hits

    def overhead(self) -> Overhead | None:
        """What memscope's own work cost; ``None`` before :meth:`wait`."""
        if self._waited is None:
            return None
        return Overhead(analysis_seconds=self.worker.busy_seconds,
                        after_exit_seconds=self._waited,
                        host_bytes=self.worker.largest_growth,
                        variant_compiles=self.variant_compiles - self.cache_hits,
                        variant_cache_hits=self.cache_hits,
                        variants_reused=self.variants_reused,
                        advice_skipped=self.advice_skipped,
                        early_compiles=self.early_compiles,
                        early_unused=self.early_unused,
                        dump_compiles=self.dumps["compiled"],
                        dump_cache_hits=self.dumps["kept"],
                        **_target_overhead(self.target))

    def observed(self, entry: Entry, seen: Observation | Failed) -> None:
        """Keep what a first call's buffers showed, or the error it ended in."""
        if isinstance(seen, Failed):
            self.failed(entry, seen.error, exclude=seen.outputs)
        else:
            self._first_seen(entry, seen)

    @staticmethod
    def _first_seen(entry: Entry, seen: Observation) -> None:
        entry.observation = seen
        # A deleted input no output took: look again at the next call.
        entry.watch_next = misses(seen)

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

    def count_call(self, *, repeat: bool = False, name: str | None = None) -> None:
        """Count one top-level jitted call (of the function ``name``); end the
        target once ``stop_after`` ran (or at a ``repeat``: a signature called
        before, with ``stop_at_repeat``, of the function it names if a name; or
        once the function ``stop_at_function`` names has run).

        Raises:
            ProgramStopped: this call was number ``stop_after``.
        """
        wanted = self.stop_at_repeat
        with self._lock:
            self.calls += 1
            stop = ((self.stop_after is not None and self.calls == self.stop_after)
                    or (repeat and wanted is not False
                        and (wanted is True or wanted == name))
                    or (name is not None and name == self.stop_at_function))
        if stop:
            self._stop_hit = True
            self.active = False  # nothing more to record, even if the target goes on
            raise ProgramStopped(self.calls)

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


def describe_environment() -> Environment:
    """The JAX installation and devices the figures are taken on (this starts
    JAX's backends where nothing has yet)."""
    return Environment(
        jax=_compat.JAX_VERSION, jaxlib=_compat.JAXLIB_VERSION,
        backend=jax.default_backend(),
        devices=tuple(Device(id=d.id, platform=d.platform, kind=d.device_kind,
                             process_index=d.process_index) for d in jax.devices()),
        python=sys.version.split()[0],
        xla_flags=os.environ.get("XLA_FLAGS"),
        process_index=jax.process_index(), process_count=jax.process_count())


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


def output_label(entry: Any, index: int) -> str:
    """``train_step result[1]``: output leaf ``index`` of ``entry``'s calls."""
    facts = getattr(entry, "facts", None)
    outputs = facts.program.outputs if facts is not None else ()
    path = outputs[index].path if index < len(outputs) else f"output leaf {index}"
    return f"{getattr(entry, 'name', '?')} {path}"


def _target_overhead(target: Target) -> dict[str, Any]:
    """The ``--target`` accelerator's compiles, their seconds and its cache hits
    (none: compiled here, whose compiles the variants' counts hold)."""
    if target.runs_here:
        return {"target_compiles": 0, "target_compile_seconds": 0.0, "target_cache_hits": 0}
    return {"target_compiles": target.compiles,
            "target_compile_seconds": target.compile_seconds,
            "target_cache_hits": target.cache_hits}
