"""memscope's own work that the program does not need in order to run, off its path.

Reading a compiled program (serializing and decoding its module and buffer
assignment) and compiling donation variants take from milliseconds to minutes
per signature, and the program's next step needs none of it. A capture hands that
work to one :class:`Worker` thread, as jobs that hold records (avals, jaxprs, the
executable JAX runs; never the call's arrays), and waits for it only when the
report is built.

One thread runs the jobs at the program's own priority: their Python (decoding,
lowering) holds the GIL, and a low-priority thread that holds the GIL while the
system runs others stalls the program's Python with it. The XLA compiles, which
run outside the GIL, go to :attr:`Worker.compiler`, threads at the lowest
priority the system gives (Linux schedules threads one by one, so the program's
own threads keep theirs): on a 2-core machine a variant compile then takes the
cores the program leaves idle (a ``--target`` run's compiles, which are its
answer, at the program's priority: :meth:`Worker.compiler_for`). Once the
program has ended, the compiles left run at the usual priority (see ``_compile`` in
:mod:`memscope.variants.donation_variants`). docs/performance.md says what was measured.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import queue
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

#: Niceness of the compile threads: 19 is the lowest priority (docs/performance.md).
#: On XLA:CPU it holds for the calling thread only: most of a compile runs in the
#: CPU client's own thread pool, at the priority the client started it with.
NICENESS = 19

#: Growth of the process's resident memory (bytes) that makes the worker hand
#: free memory back before or after a job (:func:`release_free_memory`). A compile
#: leaves hundreds of MiB free in its thread's arena; a run of many small
#: functions grows by little, and trimming before and after each of its jobs
#: took two thirds of the worker's time (300 small functions: 3.3 s against
#: 1.2 s; docs/performance.md).
TRIM_GROWTH = 32 << 20

Job = Callable[[], None]


class Worker:
    """Runs jobs one after another in a background thread, in the order given.

    A job never raises into the worker (each catches its own errors); one that
    does is dropped. The thread starts with the first job and ends at
    :meth:`close`. It is not a daemon: Python's exit waits for the job it is
    running, since ending the process inside an XLA compile aborts it.
    """

    def __init__(self, *, name: str = "memscope-worker") -> None:
        self._name = name
        self._jobs: queue.SimpleQueue[Job | None] = queue.SimpleQueue()
        self._idle = threading.Condition()
        self._pending = 0
        self._thread: threading.Thread | None = None
        self._pid = os.getpid()
        self._compiler: ThreadPoolExecutor | None = None
        self._target_compiler: ThreadPoolExecutor | None = None
        self._started: list[threading.Thread] = []
        #: set by :meth:`cancel`: jobs not yet started are skipped
        self.cancelled = False
        #: set while :meth:`wait` waits: the program has ended, the cores are free
        self.draining = False
        #: seconds the worker spent on jobs
        self.busy_seconds = 0.0
        #: the largest growth of the process's resident memory over one job (its
        #: working set, and what it keeps); ``None`` before a job ran, or where the
        #: system does not say (see :func:`resident_bytes`)
        self.largest_growth: int | None = None
        #: resident memory at the last trim, or the least seen since
        self._trimmed_at: int | None = None

    def submit(self, job: Job) -> None:
        """Queue ``job``; it runs after every job queued before it."""
        with self._idle:
            self._pending += 1
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name=self._name)
                self._thread.start()
                self._started.append(self._thread)
        self._jobs.put(job)

    @property
    def compiler(self) -> ThreadPoolExecutor:
        """Threads at the lowest priority, one per core, for work outside the GIL."""
        with self._idle:
            if self._compiler is None:
                self._compiler = ThreadPoolExecutor(
                    max_workers=os.cpu_count() or 1, thread_name_prefix=f"{self._name}-compile",
                    initializer=_lower_priority)
            return self._compiler

    def compiler_for(self, runs_here: bool) -> ThreadPoolExecutor:
        """The threads that compile for a target: :attr:`compiler` where the
        programs also run here (the compiles yield the cores to the program);
        for a ``--target``, threads at the program's own priority, one per core.

        A ``--target`` run's answer is its compiles: at the lowest priority a
        loaded machine starves them, and XLA's own compile threads, started by
        them, inherit it (the scanned LM step of benchmarks/bench_target.py
        beside two busy processes on 2 cores: 204 s at the lowest priority, 31 s
        at the program's; on a quiet machine alike: docs/performance.md).
        """
        if runs_here:
            return self.compiler
        with self._idle:
            if self._target_compiler is None:
                self._target_compiler = ThreadPoolExecutor(
                    max_workers=os.cpu_count() or 1,
                    thread_name_prefix=f"{self._name}-compile-target")
            return self._target_compiler

    @property
    def started(self) -> bool:
        """Whether any job was ever queued."""
        return bool(self._started)

    def wait(self, tick: Callable[[], None] | None = None) -> float:
        """Block until every queued job has run; the seconds it waited. ``tick``
        is called every tenth of a second meanwhile (progress; it must not raise).

        Raises:
            KeyboardInterrupt: as the waiting thread received it; the jobs not
                started yet are then skipped (see :meth:`cancel`).
        """
        start = time.perf_counter()
        self.draining = True
        if os.getpid() != self._pid:  # a child the program forked: no thread runs here
            self.cancel()
            return 0.0
        try:
            while True:
                with self._idle:
                    if not self._pending:
                        break
                    self._idle.wait(0.1)  # in steps, so Ctrl-C is seen
                    busy = bool(self._pending)
                if tick is not None and busy:  # (not holding the jobs' lock)
                    tick()
        except BaseException:
            self.cancel()
            raise
        return time.perf_counter() - start

    def cancel(self) -> None:
        """Skip the jobs that have not started (the one running ends as it would)."""
        self.cancelled = True

    def close(self) -> None:
        """End the thread once the queued jobs are done (or skipped, if cancelled)."""
        with self._idle:
            thread, self._thread = self._thread, None
            pools = [p for p in (self._compiler, self._target_compiler) if p is not None]
            self._compiler = self._target_compiler = None
        if thread is not None:
            self._jobs.put(None)
        for pool in pools:
            pool.shutdown(wait=False)  # its threads end once their compiles do

    def join(self, timeout: float | None = None) -> None:
        """Wait for the threads this worker started to end (after :meth:`close`)."""
        for thread in self._started:
            thread.join(timeout)
        for thread in threading.enumerate():
            if thread.name.startswith(f"{self._name}-compile"):
                thread.join(timeout)

    def _run(self) -> None:
        while True:
            job: Job | None = self._jobs.get()
            if job is None:
                return
            try:
                if not self.cancelled:
                    self._timed(job)
            except Exception:  # a job's own failure must not end the worker
                pass
            finally:
                job = None  # what the job holds goes now, not with the next job
                with self._idle:
                    self._pending -= 1
                    self._idle.notify_all()

    def _timed(self, job: Job) -> None:
        start = time.perf_counter()
        # This thread allocates from a malloc arena of its own, which cannot reuse
        # what the program's threads freed (a compile's working memory, say): hand
        # that back first, so the job's memory does not come on top of it.
        before = self._trim_if_grown(resident_bytes())
        try:
            job()
        finally:
            # Measured before the job's free memory goes back: its working set.
            after = resident_bytes()
            self._trim_if_grown(after)
            self.busy_seconds += time.perf_counter() - start
            if before is not None and after is not None:
                self.largest_growth = max(self.largest_growth or 0, after - before)

    def _trim_if_grown(self, now: int | None) -> int | None:
        """Hand free memory back if the process grew by :data:`TRIM_GROWTH` since
        the last time (or where it cannot tell); the resident memory after."""
        if now is not None and self._trimmed_at is not None:
            self._trimmed_at = min(self._trimmed_at, now)
            if now - self._trimmed_at < TRIM_GROWTH:
                return now
        release_free_memory()
        now = resident_bytes()
        self._trimmed_at = now
        return now


def _lower_priority() -> None:
    """Make the calling thread yield the cores to the program's threads.

    On Linux ``setpriority`` on a thread's native id lowers that thread only
    (and the threads it starts afterwards), not the program's. Elsewhere, or
    where it is not allowed, this does nothing.
    """
    with contextlib.suppress(AttributeError, OSError):
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), NICENESS)


def release_free_memory() -> None:
    """Hand memory that ``malloc`` holds free back to the system (glibc only).

    XLA's compiles leave their working memory free but mapped in the malloc arena
    of the thread that compiled; without this, the process's resident memory
    keeps the largest variant compile's working set to the end of the run.
    """
    try:
        trim = ctypes.CDLL(None).malloc_trim
    except (OSError, AttributeError):  # not glibc
        return
    trim(0)


def resident_bytes() -> int | None:
    """The process's resident memory now (Linux ``/proc``); ``None`` elsewhere."""
    try:
        with open("/proc/self/statm", "rb") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return None
