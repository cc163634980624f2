"""The capture's side of the variants: what they need of it, and nothing more.

:class:`VariantHost` is what a capture hands the variants it schedules
(:class:`memscope.variants.donation_variants.Host`): the advice asked for, the
requested donation, the target they are compiled for, the compiles kept across
runs, the worker they run in, JAX's warnings recorded per thread, and the
count of what they compiled (:class:`~memscope.capturing.counts.WorkCounts`).
Its reason to change: what the variants need of the capture.
"""

from __future__ import annotations

import contextlib
from typing import Any

from memscope.analysis.advice import AdviceLevel
from memscope.capturing.counts import WorkCounts
from memscope.capturing.worker import Worker
from memscope.compiled.cache import CompileCache
from memscope.compiled.targets.base import Target
from memscope.variants.donation import VariantRequest


class VariantHost:
    """What the variants of one capture are compiled with, and where they count."""

    def __init__(self, *, advice: AdviceLevel, request: VariantRequest | None,
                 target: Target, cache: CompileCache | None, proxy: Any) -> None:
        self.advice: AdviceLevel = advice
        self.request = request
        #: what the functions are compiled for: this machine, or a ``--target``
        #: accelerator (compiled for too, its figures the functions')
        self.target = target
        #: the compiles memscope reads kept across runs (:mod:`memscope.compiled.cache`)
        self.cache = cache
        #: memscope's work off the program's path (see :mod:`memscope.capturing.worker`)
        self.worker = Worker()
        self.counts = WorkCounts()
        self._proxy = proxy

    def recording_warnings(self, *, emit: bool = True
                           ) -> contextlib.AbstractContextManager[list[str]]:
        """JAX's warnings on this thread, recorded (and emitted, unless not ``emit``)."""
        return self._proxy.recording(emit=emit)

    def count_variants(self, *, compiled: int, reused: int) -> None:
        """Count the variants compiled, and those answered without a compile."""
        self.counts.count_variants(compiled=compiled, reused=reused)

    def advice_allowed(self, peak: int | None) -> bool:
        """Whether a function with this compiled peak gets its advised compile
        (:meth:`~memscope.capturing.counts.WorkCounts.advice_allowed`)."""
        return self.counts.advice_allowed(peak)

    def early_allowed(self) -> bool:
        """Whether a first call may be traced before JAX's call, to begin its
        advised variant early (:mod:`memscope.variants.early`): with the advice
        on, no variant asked for beside it, within the counts'
        limits (:meth:`~memscope.capturing.counts.WorkCounts.early_allowed`).
        JAX's call reuses that trace; only a call whose trace fails is traced
        again by JAX (to raise its error), so a run of many small tests stops
        trying early."""
        return (self.advice != "off" and self.request is None
                and self.counts.early_allowed())

    @property
    def cache_hits(self) -> int:
        """The variants read from the cache instead of compiled."""
        return 0 if self.cache is None else self.cache.hits
