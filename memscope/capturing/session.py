"""The entries of one capture, and what the run showed between and after calls.

A :class:`Session` keeps the entries in the order their first call happened,
counts top-level calls (and ends the program at ``stop_after``), samples device
memory (:class:`~memscope.capturing.device_memory.DeviceMemory`) and live
arrays after calls, and runs memscope's own work in its worker, off the
program's path, waiting for it at the end. What the variants it schedules need of it is its
:class:`~memscope.capturing.host.VariantHost` (``host``), which counts
memscope's own work (:class:`~memscope.capturing.counts.WorkCounts`).
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import jax

from memscope import _compat
from memscope.analysis import oom
from memscope.analysis.advice import AdviceLevel, advice_level
from memscope.analysis.observed import Observation, misses
from memscope.capturing import between, residency
from memscope.capturing.device_memory import DeviceMemory, device_limits
from memscope.capturing.entry import Entry
from memscope.capturing.hold import CLEARED, ENDED, Hold
from memscope.capturing.host import VariantHost
from memscope.capturing.observe import CallFailed, at_end
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
    Overhead,
    Runtime,
)
from memscope.variants import remat
from memscope.variants.donation import VariantRequest

#: Live arrays listed by size at the end of a run.
LARGEST_LIVE_ARRAYS = 10


class Session:
    """The entries of one capture, in the order their first call happened."""

    def __init__(self, proxy: Any, *, advise: bool | AdviceLevel = False,
                 request: VariantRequest | None = None,
                 stop_after: int | None = None,
                 remat_flops: float | None = None, target: Target | None = None) -> None:
        self.entries: list[Entry] = []
        self.active = True
        #: what the variants the session schedules are compiled with, and where
        #: memscope's own work is counted
        self.host = VariantHost(advice=advice_level(advise), request=request,
                                target=target if target is not None else HereTarget(),
                                cache=CompileCache.from_environment(), proxy=proxy)
        #: measure checkpoint policies of differentiated functions (with advice)
        self.remat = remat_flops is not None and self.host.advice != "off"
        self.remat_flops = (remat_flops if remat_flops is not None
                            else remat.DEFAULT_MAX_FLOPS_INCREASE)
        if remat_flops is not None and remat_flops < 0:
            raise MemscopeError(f"remat_flops must be at least 0, got {remat_flops}")
        self.stop_after = stop_after
        #: keep each entry's call in shapes (``memscope fit`` compiles it again)
        self.keep_calls = False
        #: end the program at a repeat: of any signature (``True``), or of the
        #: named function's only (a name: ``memscope fit --function NAME``)
        self.stop_at_repeat: bool | str = False
        #: end the program once the function of this name has run its first call
        #: (``memscope bisect --function NAME``: what it needs is compiled then)
        self.stop_at_function: str | None = None
        #: hears where the compiles stand while :meth:`wait` waits for them
        self.progress: Reporter = SILENT
        self._stop_hit = False
        self.calls = 0
        self._lock = threading.Lock()
        self._by_key: dict[Any, Entry] = {}
        #: device memory after each call, where the backend keeps statistics
        self.device = DeviceMemory()
        self._live: LiveArrays | None = None
        self._finished = False
        #: compile time, live arrays over the run, donated buffers (:mod:`memscope.capturing.between`)
        self.clock = between.CompileClock()
        self.live_sampler = residency.RunSampler()
        self.ledger = between.DonationLedger()
        self._waited: float | None = None
        self._after_end: list[Callable[[], None]] = []
        #: what the pending work holds of the program, let go at the end at the latest
        self._holds: list[Hold] = []
        #: compiles of ``jax.pmap`` that ran outside ``jax.jit`` (JAX 0.7), unseen
        self.uncaptured_pmaps = 0
        #: the SHA-256 of each file a jit was made in (read once per run)
        self.file_hashes: dict[str, str | None] = {}
        #: the JAX and devices the figures were taken on, recorded at the capture's
        #: end (None: the program started no device, and memscope started none)
        self.environment: Environment | None = None

    @property
    def target(self) -> Target:
        """What the functions are compiled for: this machine, or a ``--target``
        accelerator (compiled for too, its figures the functions')."""
        return self.host.target

    @property
    def worker(self) -> Worker:
        """memscope's work off the program's path (:mod:`memscope.capturing.worker`)."""
        return self.host.worker

    @property
    def stopped(self) -> bool:
        """True once ``stop_after`` calls ran and the program was told to end."""
        return self._stop_hit or (self.stop_after is not None and self.calls >= self.stop_after)

    def finish(self) -> None:
        """Note what the run left alive; the first call counts (the program's end)."""
        if self._finished:
            return
        self._finished = True
        self._prepare_for_target()
        if not _compat.hooks.backends_initialized():
            return  # the program used no device; do not start one now
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
        if self.device.available:
            return Runtime(device_memory=tuple(self.device.samples),
                           timeline_truncated=self.device.truncated, live_arrays=self._live,
                           overhead=overhead, live_timeline=timeline)
        note = ("no jitted call ran" if self.device.available is None else
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
            self.device.sample(self.calls + 1, entry.name)
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

    def overhead(self) -> Overhead | None:
        """What memscope's own work cost; ``None`` before :meth:`wait`."""
        if self._waited is None:
            return None
        return self.host.counts.overhead(
            analysis_seconds=self.worker.busy_seconds, after_exit_seconds=self._waited,
            host_bytes=self.worker.largest_growth, cache_hits=self.host.cache_hits,
            target=self.target)

    def observed(self, entry: Entry, seen: Observation | CallFailed) -> None:
        """Keep what a first call's buffers showed, or the error it ended in."""
        if isinstance(seen, CallFailed):
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
        entry.failure_memory = device_limits()

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
            self.active = False  # nothing more to record, even if the program goes on
            raise ProgramStopped(self.calls)

    def records(self, leaves: Sequence[Any] = ()) -> bool:
        """The one rule for what memscope records: a call (or an ahead-of-time
        stage) made while the capture is active, at the top level, on concrete
        values (the flat ``leaves``, where known). Anything else passes straight
        through to JAX with no work of memscope's: it is staged into an enclosing
        trace (``jit``, ``grad``, ``eval_shape``, a ``scan`` or ``while_loop``
        body), or holds tracers that leaked into a call at the top level
        (``ensure_compile_time_eval``); a tracer has no ``sharding``, no buffer
        and no address to read."""
        return (self.active and _compat.hooks.is_top_level_call()
                and not any(_compat.values.is_tracer(x) for x in leaves))

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

    def recording_warnings(self) -> contextlib.AbstractContextManager[list[str]]:
        """JAX's warnings while the program's own call lowers, recorded and emitted."""
        return self.host.recording_warnings()


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

