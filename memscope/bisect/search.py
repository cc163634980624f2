"""Which releases to try, and where each function's figures moved: pure, no
environments and no JAX (:func:`search_releases` is given a way to try a release).

The two ends first, then halving: a stretch whose two ends have the same
figures (within the threshold) for every function is taken as unmoved; one
whose ends differ is halved until two neighbouring releases tried differ,
which is a move, said for each function whose figures differ there. So one
move among n releases costs about log2(n) + 2 tries, and every move whose
stretch shows it is found (a function that moves twice is said twice); a move
and its reversal within one unmoved-looking stretch are not seen (the tried
table shows what was compared).

A release that cannot be installed is left out and its neighbour tried; a
program that fails on the oldest releases (an API it uses came later)
narrows the range to the first release it runs on, found by halving too.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from memscope.bisect.releases import key
from memscope.check.compare import MEMORY_FIGURES

#: a figure moved when it changed by more than this fraction of the larger of
#: its two values (``--min-change``)
DEFAULT_MIN_CHANGE = 0.01

#: a function's figures on a release (MEMORY_FIGURES, and the rule of its peak: ``peak_rule``)
Figures = dict[str, Any]
TryStatus = Literal["ran", "not_installed", "failed"]


@dataclass
class Tried:
    """One release tried: ``ran`` (its functions' figures, by function key),
    ``not_installed`` or ``failed`` (the program failed there; ``error`` says
    how, in one line)."""

    release: str
    status: TryStatus
    functions: dict[str, Figures] = field(default_factory=dict)
    error: str | None = None
    #: anything the caller keeps with it (the report's path, the environment)
    extra: dict[str, object] = field(default_factory=dict)


@dataclass(frozen=True)
class Move:
    """``function``'s figures moved between ``previous`` and ``release`` (the
    releases between them, if any, could not be tried: ``untried``)."""

    function: str
    previous: str
    release: str
    before: Figures
    after: Figures
    untried: tuple[str, ...] = ()


@dataclass
class Search:
    releases: list[str]
    tried: dict[str, Tried] = field(default_factory=dict)
    moves: list[Move] = field(default_factory=list)
    #: the range the program runs on, where it fails at one end or both (a
    #: release it fails on: ``failing`` the older, ``failing_newer`` the newer)
    runs_on: tuple[str, str] | None = None
    failing: Tried | None = None
    failing_newer: Tried | None = None

    @property
    def order(self) -> list[Tried]:
        return [self.tried[r] for r in sorted(self.tried, key=key)]


def moved(before: int | None, after: int | None, min_change: float) -> bool:
    """A figure moved: appeared, went, or changed by more than ``min_change``
    of the larger of the two."""
    if before is None or after is None:
        return (before is None) != (after is None)
    return abs(after - before) > min_change * max(abs(before), abs(after))


def differing(a: Tried, b: Tried, min_change: float) -> list[str]:
    """The functions whose figures differ between two releases that ran (one
    present in only one of them included), in ``b``'s order then ``a``'s."""
    names = list(b.functions) + [n for n in a.functions if n not in b.functions]
    out = []
    for name in names:
        x, y = a.functions.get(name), b.functions.get(name)
        if x is None or y is None or any(moved(x.get(f), y.get(f), min_change)
                                         for f in MEMORY_FIGURES):
            out.append(name)
    return out


def search_releases(releases: Sequence[str], attempt: Callable[[str], Tried], *,
                    min_change: float = DEFAULT_MIN_CHANGE, into: Search | None = None
                    ) -> Search:
    """Find every move among ``releases`` (oldest first), trying each release
    with ``attempt`` at most once; recorded in ``into`` as it goes (what was
    tried before an interruption stays there)."""
    found = into if into is not None else Search(list(releases))
    if releases:
        _Walk(list(releases), attempt, min_change, found).run()
    return found


class _Walk:
    def __init__(self, releases: list[str], attempt: Callable[[str], Tried],
                 min_change: float, found: Search) -> None:
        self.releases, self.attempt, self.min_change, self.found = (
            releases, attempt, min_change, found)

    def get(self, i: int) -> Tried:
        r = self.releases[i]
        if r not in self.found.tried:
            self.found.tried[r] = self.attempt(r)
        return self.found.tried[r]

    def status(self, i: int) -> TryStatus:
        return self.get(i).status

    def run(self) -> None:
        ends = self.ends()
        if ends is not None:
            self.walk(*ends)

    def ends(self) -> tuple[int, int] | None:
        """The oldest and newest releases that run the program, the range
        narrowed where it fails at an end; ``None`` where none runs."""
        status, found = self.status, self.found
        lo, hi = 0, len(self.releases) - 1
        while lo < hi and status(lo) == "not_installed":
            lo += 1
        while hi > lo and status(hi) == "not_installed":
            hi -= 1
        if status(lo) == "not_installed":
            return None
        if status(lo) != "failed" and status(hi) != "failed":
            return lo, hi
        if status(lo) == "failed" and status(hi) == "failed":
            middle = next((i for i in sorted(range(lo + 1, hi),
                                             key=lambda i: abs(i - (lo + hi) / 2))
                           if status(i) != "not_installed"), None)
            if middle is None or status(middle) != "ran":
                found.failing = self.get(lo)
                return None
            good = middle
        else:
            good = hi if status(lo) == "failed" else lo
        if status(lo) == "failed":
            found.failing = self.get(lo)
            lo = self.edge(good, lo)
        if status(hi) == "failed":
            found.failing_newer = self.get(hi)
            hi = self.edge(good, hi)
        found.runs_on = (self.releases[lo], self.releases[hi])
        return lo, hi

    def edge(self, good: int, bad: int) -> int:
        """The release that runs nearest ``bad`` (which fails), from ``good``, by halving."""
        step = 1 if bad > good else -1
        while abs(bad - good) > 1:
            j = (good + bad) // 2
            while j != bad and self.status(j) == "not_installed":
                j += step
            if j == bad:
                break
            if self.status(j) == "ran":
                good = j
            else:
                bad = j
        return good

    def walk(self, a: int, b: int) -> None:
        """The moves between the releases ``a`` and ``b`` (both ran)."""
        if not differing(self.get(a), self.get(b), self.min_change):
            return
        mid = (a + b) // 2
        # the release nearest the middle that runs
        for i in sorted(range(a + 1, b), key=lambda i: (abs(i - mid), i)):
            if self.status(i) == "ran":
                self.walk(a, i)
                self.walk(i, b)
                return
        untried = tuple(self.releases[a + 1:b])
        for name in differing(self.get(a), self.get(b), self.min_change):
            self.found.moves.append(Move(name, self.releases[a], self.releases[b],
                                         self.get(a).functions.get(name, {}),
                                         self.get(b).functions.get(name, {}), untried))
