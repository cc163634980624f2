"""Which live arrays kept growing over a run: pure functions over sampled counts.

:mod:`memscope.capturing.residency` samples ``jax.live_arrays()`` before top-level
calls and counts the arrays per group: their shape, dtype and sharding, and the
captured function whose call made them (``None``: made outside a captured
call's result, or not seen). Each sample also says which functions ran since
the previous one.

A group *keeps growing* (a problem: a loop keeps what a function returns, or
what is made from it, call after call) when, after the first sample (the
program's set-up), its count never falls, rose by at least :data:`MIN_GROWTH`
arrays, rose between at least :data:`MIN_RISES` pairs of samples with one
function called between each pair (the repeated calls that leave more each
time), and was still rising in the second half of the run: a bounded history
(the last 100 losses) levels off and is not flagged, nor is a count that went
up and down. A count that rose as much, but at one or two places, or with no
function called across all its rises (a notebook's cell making a new optimizer
state), is a *one-off rise*: a note, not a leak, where it came after a function
had been called more than once (before, it is the program's set-up: not listed).
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from memscope.report import LiveGrowth

#: Fewest arrays a group must have gained to be flagged.
MIN_GROWTH = 5
#: Fewest samples (after the first) to judge growth from.
MIN_SAMPLES = 3
#: Fewest intervals between samples in which a group that keeps growing rose.
MIN_RISES = 3
#: Growing groups listed (those that keep growing first), largest growth in bytes first.
MAX_GROWING = 5

#: (shape, dtype, sharding text, the function that made the arrays: its index
#: among the run's functions, ``None`` where no captured call's result)
GroupKey = tuple[tuple[int, ...], str, "str | None", "int | None"]


@dataclass(frozen=True)
class GroupSample:
    """One sample: the call it preceded, per group its count and bytes per array,
    and the functions (by index) called since the previous sample."""

    call: int
    groups: Mapping[GroupKey, tuple[int, int]]
    called: frozenset[int] = frozenset()
    #: per group, the user's variables that held its arrays, most first
    holders: Mapping[GroupKey, tuple[str, ...]] = field(default_factory=dict)
    #: taken once the program had ended (its functions' locals are gone)
    end: bool = False
    #: some function had been called more than once by then (the program's loop began)
    looping: bool = True


def growing(samples: Sequence[GroupSample],
            producers: Mapping[GroupKey, str] | None = None,
            functions: Mapping[int, str] | None = None) -> tuple[LiveGrowth, ...]:
    """The groups that grew over ``samples`` (in call order): those that keep
    growing, then one-off rises (``steady`` false). ``producers`` names each
    group's origin (the function output its arrays came from), ``functions`` a
    function by its index. Where the program's end let go of a group (a
    function's local list, freed when it returned), the samples before the end
    judge it."""
    found: list[LiveGrowth] = []
    keys = {key for s in samples[-2:] for key in s.groups}
    for key in keys:
        series = list(samples)
        if series[-1].end and len(series) > 1 and (series[-1].groups.get(key, (0, 0))[0]
                                                   < series[-2].groups.get(key, (0, 0))[0]):
            series.pop()
        grew = _grew(key, series, producers or {}, functions or {})
        if grew is not None:
            found.append(grew)
    found.sort(key=lambda g: (not g.steady, -g.gained_bytes))
    return tuple(found[:MAX_GROWING])


def _grew(key: GroupKey, samples: Sequence[GroupSample], producers: Mapping[GroupKey, str],
          functions: Mapping[int, str]) -> LiveGrowth | None:
    """``key``'s growth over ``samples``: see :func:`growing`."""
    later = list(samples[1:]) if len(samples) > MIN_SAMPLES else list(samples)
    if len(later) < MIN_SAMPLES:
        return None
    first, last = later[0], later[-1]
    if last.call <= first.call or key not in last.groups:
        return None
    middle_call = (first.call + last.call) / 2
    middle = max((s for s in later if s.call <= middle_call), key=lambda s: s.call)
    end, each = last.groups[key]
    counts = [s.groups.get(key, (0, each))[0] for s in later]
    if end - counts[0] < MIN_GROWTH or any(b < a for a, b in itertools.pairwise(counts)):
        return None
    rises = [i for i in range(1, len(later)) if counts[i] > counts[i - 1]]
    repeated = frozenset.intersection(*(later[i].called for i in rises))
    maker = key[3]
    looped = len(rises) >= MIN_RISES and bool(repeated)
    steady = looped and end > middle.groups.get(key, (0, each))[0]
    if looped and not steady:
        return None  # levelled off: a bounded history, not a leak
    before = rises[0] - 1  # the last sample before the count rose
    if not steady and not later[before].looping:
        return None  # the program's set-up (its state made before its loop began)
    which = (maker if maker in repeated else min(repeated)) if steady else None
    # the variables that held them at the latest sample that found one
    held = next((s.holders[key] for s in reversed(later) if s.holders.get(key)), ())
    held_by = ", ".join(held) or None
    shape, dtype, sharding, _ = key
    return LiveGrowth(
        shape=shape, dtype=dtype, sharding=sharding, bytes_each=each,
        first_call=later[before].call, first_count=counts[before],
        last_call=last.call, last_count=end, produced_by=producers.get(key), steady=steady,
        repeated=None if which is None else functions.get(which), held_by=held_by)
