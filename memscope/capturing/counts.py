"""The count of memscope's own work in one capture, and the limits it keeps to.

:class:`WorkCounts` counts what the report's overhead says memscope did beside
the program (variants compiled and reused, advised compiles given and refused,
advised variants begun early, buffer assignments read from XLA's dump) and
decides, from those counts, whether one more advised or early compile is
allowed. Thread-safe: the program's thread and memscope's worker both count.
Its reason to change: what memscope counts of its own work.
"""

from __future__ import annotations

import threading
from collections import Counter
from typing import Any

from memscope.compiled.targets.base import Target
from memscope.report import Overhead

#: Signatures that get the advised compile whatever their size; after them,
#: only those with a compiled peak of at least ADVICE_MIN_PEAK.
ADVICE_FOR_EVERY = 50
ADVICE_MIN_PEAK = 1 << 20
#: first calls that may begin their advised variant early (a run's
#: large functions come first: a model's init, its step, its evaluation), and
#: first calls traced to see whether they may (see WorkCounts.early_allowed)
EARLY_FOR_FIRST = 4
EARLY_TRACES = 16


class WorkCounts:
    """memscope's own compiles and reads in one capture, counted."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.variant_compiles = 0
        self.variants_reused = 0
        #: the program's functions compiled again with XLA's dump to read their
        #: buffer assignment (XLA:GPU), and those whose dump a run kept before
        self.dumps: Counter[str] = Counter()
        #: signatures given an advised compile, and those refused one (many functions)
        self.advice_given = 0
        self.advice_skipped = 0
        #: advised variants begun early (memscope.variants.early), those left
        #: unused, and the first calls traced to see whether one could begin
        self.early_compiles = 0
        self.early_unused = 0
        self.early_traced = 0

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

    def count_early(self, *, traced: bool = False, wasted: bool = False) -> None:
        """Count a first call traced early, an early compile begun, or one left unused."""
        with self._lock:
            if traced:
                self.early_traced += 1
            elif wasted:
                self.early_unused += 1
            else:
                self.early_compiles += 1

    def early_allowed(self) -> bool:
        """Whether one more first call may be traced to begin its advised variant
        early: among the first :data:`EARLY_TRACES` first calls large enough,
        until :data:`EARLY_FOR_FIRST` have begun one, while advised compiles are
        given to every signature (:data:`ADVICE_FOR_EVERY`)."""
        with self._lock:
            return (self.early_compiles < EARLY_FOR_FIRST
                    and self.early_traced < EARLY_TRACES
                    and self.advice_given < ADVICE_FOR_EVERY)

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

    def overhead(self, *, analysis_seconds: float, after_exit_seconds: float,
                 host_bytes: int | None, cache_hits: int, target: Target) -> Overhead:
        """What memscope's own work cost, with the worker's figures and the
        variants the cache answered (``cache_hits``: not compiled)."""
        return Overhead(analysis_seconds=analysis_seconds,
                        after_exit_seconds=after_exit_seconds,
                        host_bytes=host_bytes,
                        variant_compiles=self.variant_compiles - cache_hits,
                        variant_cache_hits=cache_hits,
                        variants_reused=self.variants_reused,
                        advice_skipped=self.advice_skipped,
                        early_compiles=self.early_compiles,
                        early_unused=self.early_unused,
                        dump_compiles=self.dumps["compiled"],
                        dump_cache_hits=self.dumps["kept"],
                        **_target_overhead(target))


def _target_overhead(target: Target) -> dict[str, Any]:
    """The ``--target`` accelerator's compiles, their seconds and its cache hits
    (none: compiled here, whose compiles the variants' counts hold)."""
    if target.runs_here:
        return {"target_compiles": 0, "target_compile_seconds": 0.0, "target_cache_hits": 0}
    return {"target_compiles": target.compiles,
            "target_compile_seconds": target.compile_seconds,
            "target_cache_hits": target.cache_hits}
