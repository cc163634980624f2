"""The installed JAX and jaxlib, and whether memscope supports their series.

Read from the installed distributions' metadata, so that ``memscope run`` can
say (or refuse) before the program starts without importing JAX: the program
imports JAX itself, after setting what it reads at import (``JAX_ENABLE_X64``,
``JAX_PLATFORMS``, ...). :mod:`memscope._compat` uses the same rules on the
imported JAX's own versions.
"""

from __future__ import annotations

import functools
import importlib.metadata
import os
import re

#: Where a user on a newer JAX reports a difference (the project names no URL).
REPORT_TO = "memscope's issue tracker"


@functools.cache
def installed(distribution: str) -> str | None:
    """The installed version of ``distribution`` (``jax``, ``jaxlib``); ``None`` if
    not installed. Reads metadata only: nothing of JAX is imported."""
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return None


def _installed(jax_version: str | None, jaxlib_version: str | None
               ) -> tuple[tuple[str, str], tuple[str, str]]:
    return (("JAX", (jax_version if jax_version is not None else installed("jax")) or "?"),
            ("jaxlib", (jaxlib_version if jaxlib_version is not None
                        else installed("jaxlib")) or "?"))


#: The JAX (and jaxlib) series memscope is tested on (CI runs the suite on each),
#: oldest first. pyproject.toml requires ``jax>=0.7`` with no upper bound, so that
#: installing memscope never moves a user's JAX: a newer series runs with its
#: figures unverified (:func:`unverified_line`), an older one is refused
#: (:func:`support_problem`).
SUPPORTED_SERIES: tuple[tuple[int, int], ...] = ((0, 7), (0, 8), (0, 9), (0, 10), (0, 11),
                                                 (0, 12))
#: Set to 1 to run on an older JAX anyway (figures unverified).
ALLOW_UNSUPPORTED_ENV = "MEMSCOPE_ALLOW_UNSUPPORTED_JAX"


def series(version: str) -> tuple[int, int] | None:
    """``(0, 8)`` for ``"0.8.3"`` or ``"0.8.0.dev20251001"``; ``None`` if unreadable."""
    match = re.match(r"(\d+)\.(\d+)", version)
    return (int(match[1]), int(match[2])) if match else None


def _verified_text() -> str:
    return f"{_series_text(SUPPORTED_SERIES[0])} to {_series_text(SUPPORTED_SERIES[-1])}"


def support_problem(jax_version: str | None = None,
                    jaxlib_version: str | None = None) -> str | None:
    """Why memscope refuses this JAX installation (or the versions given), as one
    line: a series older than the oldest it supports, or a version it cannot
    read; else ``None`` (a supported series, or a newer one: see
    :func:`unverified_line`)."""
    for name, version in _installed(jax_version, jaxlib_version):
        found = series(version)
        if found is None or found < SUPPORTED_SERIES[0]:
            return (f"{name} {version} is not supported: memscope supports JAX and jaxlib "
                    f"{_series_text(SUPPORTED_SERIES[0])} and later (verified on "
                    f"{_verified_text()}); run it in an environment with one of those (this "
                    f"one was not changed), or set {ALLOW_UNSUPPORTED_ENV}=1 to try anyway "
                    "with unverified figures")
    return None


def newer_than_verified(jax_version: str | None = None,
                        jaxlib_version: str | None = None) -> str | None:
    """``"JAX 0.11.0"`` when this JAX (or jaxlib, or the versions given) is of a
    series newer than any memscope is verified on, and none is refused; else
    ``None``."""
    if support_problem(jax_version, jaxlib_version) is not None:
        return None
    for name, version in _installed(jax_version, jaxlib_version):
        found = series(version)
        if found is not None and found > SUPPORTED_SERIES[-1]:
            return f"{name} {version}"
    return None


def unverified_line(jax_version: str | None = None,
                    jaxlib_version: str | None = None) -> str | None:
    """The one line that says this JAX's figures are unverified: a newer series
    (it runs), or a refused one the user allowed (:data:`ALLOW_UNSUPPORTED_ENV`);
    ``None`` on a supported series, and on a refused one not allowed."""
    newer = newer_than_verified(jax_version, jaxlib_version)
    if newer is not None:
        return (f"{newer} is newer than the series memscope is verified on "
                f"({_verified_text()}); its figures are unverified: report differences "
                f"to {REPORT_TO}")
    problem = support_problem(jax_version, jaxlib_version)
    if problem is not None and unsupported_allowed():
        return f"{problem.split(':')[0]}; running anyway, figures unverified"
    return None


def unverified_note(jax_version: str | None = None,
                    jaxlib_version: str | None = None) -> str | None:
    """What a report made on an unverified JAX says of its figures (its ``notes``)."""
    newer = newer_than_verified(jax_version, jaxlib_version)
    if newer is not None:
        return (f"{newer} is newer than the series memscope is verified on "
                f"({_verified_text()}): the figures are unverified")
    problem = support_problem(jax_version, jaxlib_version)
    if problem is not None:
        return (f"{problem.split(':')[0]}: the figures are unverified "
                f"({ALLOW_UNSUPPORTED_ENV} is set)")
    return None


def unsupported_allowed() -> bool:
    """True when the user asked to run on an older JAX anyway."""
    return os.environ.get(ALLOW_UNSUPPORTED_ENV, "") not in ("", "0")


def _series_text(s: tuple[int, int]) -> str:
    return f"{s[0]}.{s[1]}"


#: The line that says this JAX's figures are unverified, once said in this
#: process (by the CLI, or by the first capture()).
_unverified_said: list[str] = []


def unverified_once() -> str | None:
    """The line that says this JAX's figures are unverified (:func:`unverified_line`),
    the first time it is asked for in this process; ``None`` after that, and on a
    verified JAX."""
    line = unverified_line()
    if line is None or _unverified_said:
        return None
    _unverified_said.append(line)
    return line


def unverified_said() -> str | None:
    """The unverified-JAX line, if this process has said it (the pytest plugin
    repeats it in its summary)."""
    return _unverified_said[0] if _unverified_said else None
