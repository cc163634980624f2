"""The run's device memory over its calls, and its high-water mark.

At a top-level call the device holds what the program keeps outside the call's
arguments (``resident_bytes``: the training state, a dataset, a list of logged
losses) plus the call's own peak by memscope's rule (its arguments once, its
temporaries, its outputs not aliased). :class:`RunMemory` has that sum per
device at the calls memscope sampled (and, estimated, at the calls between),
and the largest of them, :class:`HighWater`, with what made it up.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from memscope.report.memory import LiveBuffer, RoleBytes

#: ``output``: a captured call's result; ``outside``: made outside the captured
#: calls (``jax.device_put``, an operation outside jit, a library's own jit)
GroupKind = Literal["output", "outside"]


@dataclass(frozen=True)
class ResidentGroup:
    """Arrays alive just before a call, outside its arguments, by what made them.

    ``label`` is ``train_step result[0]`` for a captured call's result (its
    top-level element), ``made outside jit`` otherwise. ``held_by`` is the
    user's variable that held them (``state``, ``losses``, ``self.data``) and
    ``line`` where it was last assigned before the sample (``train.py:41``);
    ``None`` where memscope found no variable of the user's holding them.
    """

    label: str
    kind: GroupKind
    arrays: int
    #: on the device the figure is for
    bytes: int
    held_by: str | None = None
    line: str | None = None


@dataclass(frozen=True)
class RunPoint:
    """Device memory at one top-level call, on the busiest device.

    ``exact``: sampled just before this call (``jax.live_arrays()``); otherwise
    estimated from the sample before call ``from_call`` (what was alive then,
    less this function's argument bytes). ``peak_bytes`` is the call's own peak
    by memscope's rule, ``None`` where its compiled program was not read.
    """

    call: int
    function: str
    seconds: float
    device: str
    resident_bytes: int
    peak_bytes: int | None
    exact: bool
    from_call: int | None = None
    #: the largest resident groups at this call: (label, bytes)
    groups: tuple[tuple[str, int], ...] = ()
    #: the call failed (out of memory, or another error)
    failed: bool = False
    #: resident bytes on each device of :attr:`RunMemory.devices`, in its order
    per_device: tuple[int, ...] = ()

    @property
    def total_bytes(self) -> int:
        """Resident bytes plus the call's peak (its peak unknown: resident only)."""
        return self.resident_bytes + (self.peak_bytes or 0)


@dataclass(frozen=True)
class HighWater:
    """The run's largest device memory: at which call, how much, and what made it up.

    ``bytes`` = ``resident_bytes`` (what the program kept outside the call's
    arguments, by ``groups``) + ``call_peak_bytes`` (the call's peak by its
    ``peak_rule``; its largest buffers at that peak are ``buffers``;
    ``None`` where the call's compiled program was not read: ``bytes`` is then
    the resident bytes alone).
    """

    call: int
    function: str
    signature: str
    #: the user's line that made the call (``train.py:88``)
    line: str | None
    device: str
    bytes: int
    resident_bytes: int
    call_peak_bytes: int | None
    peak_rule: str | None
    exact: bool
    groups: tuple[ResidentGroup, ...]
    #: for an estimate: the call before which the sample it is carried from was taken
    from_call: int | None = None
    more_groups: int = 0
    more_group_bytes: int = 0
    buffers: tuple[LiveBuffer, ...] = ()
    #: the call's own peak by role: its buffers live at the schedule's peak
    #: (:attr:`LiveAtPeak.roles`), which add up to that peak
    call_roles: tuple[RoleBytes, ...] = ()
    #: where the backend keeps allocator statistics (GPU, TPU): the allocator's
    #: own peak over the run (``peak_bytes_in_use``), and what it says beside ours
    allocator_peak_bytes: int | None = None
    allocator_note: str | None = None


@dataclass(frozen=True)
class CallSpan:
    """One top-level call: ``function`` indexes the report's functions; seconds
    since the capture began (a call returns once dispatched: the device may run
    it later)."""

    call: int
    function: int | None
    start: float
    end: float


@dataclass(frozen=True)
class RunMemory:
    """Device memory over the run's top-level calls (see the module).

    ``how`` says how the figures were obtained and how exact they are;
    ``sampled`` of ``calls`` top-level calls were sampled exactly.
    """

    devices: tuple[str, ...]
    points: tuple[RunPoint, ...]
    high_water: HighWater | None
    calls: int
    sampled: int
    how: str
    #: seconds the samples took in all, on the program's path
    sample_seconds: float
    #: what the program held in host memory kinds at the high-water mark (not
    #: counted in the device figures)
    host_bytes: int = 0
    #: the top-level calls for a trace: the first and the last
    #: :data:`memscope.analysis.run_memory.MAX_SPANS` / 2 when there were more
    spans: tuple[CallSpan, ...] = ()
