"""The releases of a package the package index has, and a range of them.

Read with pip's ``index versions`` (the index pip is configured with, whatever
Python each release needs), so that ``memscope bisect`` tries what users can
install, and only final releases (no pre-releases or nightlies).
"""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass

from memscope.errors import MemscopeError

_RELEASE = re.compile(r"^\d+(\.\d+)*$")


def key(version: str) -> tuple[int, ...]:
    """``(0, 9, 0, 1)`` for ``"0.9.0.1"``: releases in their order (``0.9.0 < 0.9.0.1 < 0.9.1``)."""
    parts = [int(p) for p in version.split(".")]
    while len(parts) > 1 and parts[-1] == 0:
        parts.pop()
    return tuple(parts)


def is_release(version: str) -> bool:
    """A final release (``0.9.2``), not a pre-release or a dev build."""
    return bool(_RELEASE.match(version))


@dataclass(frozen=True)
class Range:
    """``FROM..TO``, both ends included."""

    low: str
    high: str

    @classmethod
    def parse(cls, text: str) -> Range:
        """``"0.9.0..0.10.2"``.

        Raises:
            MemscopeError: not two releases with ``..`` between, or the first after the second.
        """
        low, sep, high = text.partition("..")
        if not sep or not is_release(low.strip()) or not is_release(high.strip()):
            raise MemscopeError(f"a range of releases is FROM..TO, e.g. 0.9.0..0.10.2; got {text!r}")
        found = cls(low.strip(), high.strip())
        if key(found.low) > key(found.high):
            raise MemscopeError(f"the range {text} runs backwards: give the older release first")
        return found

    def select(self, versions: Sequence[str]) -> list[str]:
        """The releases among ``versions`` within the range, oldest first."""
        lo, hi = key(self.low), key(self.high)
        return sorted({v for v in versions if is_release(v) and lo <= key(v) <= hi}, key=key)

    def __str__(self) -> str:
        return f"{self.low}..{self.high}"


def index_versions(distribution: str, python: str | None = None) -> list[str]:
    """Every final release of ``distribution`` the package index has, oldest
    first, whatever Python it needs (pip's ``index versions``, run by
    ``python``, by default this one, else the first Python here that has pip:
    an environment uv made has none).

    Raises:
        MemscopeError: pip could not read the index (no network, no such
            package), in one line.
    """
    from memscope.bisect.pythons import pythons

    why = "no Python here has pip to read the package index with"
    for candidate in [python or sys.executable, *(p.path for p in pythons())]:
        command = [candidate, "-m", "pip", "index", "versions", distribution,
                   "--ignore-requires-python", "--disable-pip-version-check"]
        try:
            done = subprocess.run(command, capture_output=True, text=True, timeout=300,
                                  check=False)
        except (OSError, subprocess.TimeoutExpired) as e:
            why = str(e)
            continue
        if "No module named pip" in done.stderr:
            continue
        for line in done.stdout.splitlines():
            if line.startswith("Available versions:"):
                found = [v.strip() for v in line.split(":", 1)[1].split(",")]
                return sorted((v for v in found if is_release(v)), key=key)
        why = (done.stderr.strip().splitlines() or ["no versions listed"])[-1]
        break
    raise MemscopeError(f"the package index lists no release of {distribution}: {why}")


def companion(version: str, versions: Sequence[str]) -> str | None:
    """The release of a companion package (jaxlib) to pair with ``version`` of
    the main one (jax): the same version where it exists, else the newest one
    before it (a jax-only release ran on the jaxlib before it); ``None`` if none."""
    if version in versions:
        return version
    older = [v for v in versions if key(v) <= key(version)]
    return max(older, key=key) if older else None
