"""The Python interpreters on this machine, to build a release's environment
with one it supports (JAX 0.11 and later install on Python 3.12 and later
only, older ones on the Pythons of their time).

Found where they are usually kept: the interpreter memscope runs in (its base,
outside any virtual environment), ``python3.N`` on ``PATH``, and pyenv's
versions (``$PYENV_ROOT``, else ``~/.pyenv``); ``MEMSCOPE_PYTHONS`` adds more
(paths, separated by ``os.pathsep``). None is downloaded.
"""

from __future__ import annotations

import functools
import glob
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass

#: the oldest Python memscope runs on (pyproject.toml's requires-python)
MEMSCOPE_PYTHON = (3, 11)


@dataclass(frozen=True)
class Python:
    path: str
    version: tuple[int, int, int]

    @property
    def series(self) -> str:
        return f"{self.version[0]}.{self.version[1]}"


def _version(path: str) -> tuple[int, int, int] | None:
    try:
        done = subprocess.run([path, "-c", "import sys; print(*sys.version_info[:3])"],
                              capture_output=True, text=True, timeout=30, check=False)
        major, minor, micro = (int(x) for x in done.stdout.split())
    except (OSError, ValueError, subprocess.TimeoutExpired):
        return None
    return major, minor, micro


def _candidates() -> list[str]:
    found = [os.path.join(sys.base_prefix, "bin", f"python{sys.version_info[0]}.{sys.version_info[1]}"),
             os.path.join(sys.base_prefix, "bin", "python3")]
    root = os.environ.get("PYENV_ROOT") or os.path.join(os.path.expanduser("~"), ".pyenv")
    found += sorted(glob.glob(os.path.join(root, "versions", "*", "bin", "python3")))
    for minor in range(11, 16):
        on_path = shutil.which(f"python3.{minor}")
        if on_path:
            found.append(on_path)
    found += [p for p in os.environ.get("MEMSCOPE_PYTHONS", "").split(os.pathsep) if p]
    return found


@functools.cache
def pythons() -> tuple[Python, ...]:
    """This machine's interpreters memscope runs on (Python 3.11 and later), the
    newest of each series, newest series first."""
    best: dict[tuple[int, int], Python] = {}
    seen: set[str] = set()
    for path in _candidates():
        real = os.path.realpath(path)
        if real in seen or not os.access(real, os.X_OK):
            continue
        seen.add(real)
        version = _version(path)
        if version is None or version[:2] < MEMSCOPE_PYTHON:
            continue
        series = version[:2]
        if series not in best or version > best[series].version:
            best[series] = Python(path, version)
    return tuple(sorted(best.values(), key=lambda p: p.version, reverse=True))


def in_preference() -> list[Python]:
    """The Pythons to try for a release, in order: the series memscope runs on
    first (the user's packages were resolved on it), then the newest."""
    here = sys.version_info[:2]
    found = list(pythons())
    return ([p for p in found if p.version[:2] == here]
            + [p for p in found if p.version[:2] != here])
