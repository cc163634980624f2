"""Which live arrays kept growing over a run: pure functions over sampled counts.

:mod:`memscope.capturing.between` samples ``jax.live_arrays()`` after top-level calls and
counts the arrays per (shape, dtype, sharding). A group *grows steadily* when,
after the first sample (the program's set-up), its count never falls, rose by
at least :data:`MIN_GROWTH` arrays, and was still rising in the second half of
the run: a bounded history (the last 100 losses) levels off and is not flagged,
nor is a count that went up and down.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from memscope.report import LiveGrowth

#: Fewest arrays a group must have gained to be flagged.
MIN_GROWTH = 5
#: Fewest samples (after the first) to judge growth from.
MIN_SAMPLES = 3
#: Growing groups listed, largest growth in bytes first.
MAX_GROWING = 5

#: (shape, dtype, sharding text)
GroupKey = tuple[tuple[int, ...], str, "str | None"]


@dataclass(frozen=True)
class GroupSample:
    """One sample: the call it followed, and per group its count and bytes per array."""

    call: int
    groups: Mapping[GroupKey, tuple[int, int]]


def growing(samples: Sequence[GroupSample],
            producers: Mapping[GroupKey, str] | None = None) -> tuple[LiveGrowth, ...]:
    """The groups that grew steadily over ``samples`` (in call order), named by
    ``producers`` (the function output each group's arrays came from) where known."""
    later = list(samples[1:]) if len(samples) > MIN_SAMPLES else list(samples)
    if len(later) < MIN_SAMPLES:
        return ()
    first, last = later[0], later[-1]
    middle_call = (first.call + last.call) / 2
    middle = max((s for s in later if s.call <= middle_call), key=lambda s: s.call)
    found = []
    for key, (end, each) in last.groups.items():
        counts = [s.groups.get(key, (0, each))[0] for s in later]
        start = counts[0]
        if end - start < MIN_GROWTH or any(b < a for a, b in itertools.pairwise(counts)):
            continue
        if end <= middle.groups.get(key, (0, each))[0] or last.call <= first.call:
            continue  # levelled off: a bounded history, not a leak
        shape, dtype, sharding = key
        found.append(LiveGrowth(shape=shape, dtype=dtype, sharding=sharding, bytes_each=each,
                                first_call=first.call, first_count=start,
                                last_call=last.call, last_count=end,
                                produced_by=(producers or {}).get(key)))
    found.sort(key=lambda g: (g.last_count - g.first_count) * g.bytes_each, reverse=True)
    return tuple(found[:MAX_GROWING])
