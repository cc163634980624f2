"""Where in the user's code something happened: the first frame outside given folders.

``memscope fix`` edits the jit call a function was made by and checks the code
that called it; :mod:`memscope.capture` records both lines with this module
while the program runs, and a hash of the file the jit was made in, so that a
fix never edits a file that changed since.
"""

from __future__ import annotations

import functools
import hashlib
import os
import sys
import sysconfig
from collections.abc import Sequence
from types import FrameType

#: memscope's own package folder (``.../memscope``): frames there are never the user's.
OWN_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

#: How far up the stack the user's frame may be (JAX, a framework, memscope).
MAX_FRAMES = 64


def installed_roots() -> tuple[str, ...]:
    """The folders of installed packages and the standard library, longest first,
    each ending in a path separator: code there is not the user's own."""
    paths = sysconfig.get_paths()
    roots = {os.path.realpath(paths[k]) for k in ("purelib", "platlib", "stdlib")
             if k in paths}
    return tuple(sorted((r + os.sep for r in roots), key=len, reverse=True))


def user_frame(skip: Sequence[str]) -> tuple[str, int] | None:
    """``(absolute path, line)`` of the innermost caller whose file lies in none of
    the folders ``skip`` (each ending in a path separator); ``None`` if no frame
    within :data:`MAX_FRAMES` does, or its file is not a real one
    (``<string>``, a frozen module)."""
    frame: FrameType | None = sys._getframe(1)
    for _ in range(MAX_FRAMES):
        if frame is None:
            return None
        path = frame.f_code.co_filename
        if not path.startswith("<"):
            real = _realpath(path)
            if not real.startswith(tuple(skip)):
                return (real, frame.f_lineno) if os.path.isfile(real) else None
        frame = frame.f_back
    return None


@functools.lru_cache(maxsize=4096)
def _realpath(path: str) -> str:
    # A few system calls per frame, for every jit made: once per file is enough.
    return os.path.realpath(path)


def file_sha256(path: str, cache: dict[str, str | None] | None = None) -> str | None:
    """The SHA-256 of the file's bytes, hex; ``None`` if it cannot be read.
    ``cache`` (path -> hash) saves reading a file again within one run."""
    if cache is not None and path in cache:
        return cache[path]
    try:
        with open(path, "rb") as f:
            digest: str | None = hashlib.sha256(f.read()).hexdigest()
    except OSError:
        digest = None
    if cache is not None:
        cache[path] = digest
    return digest
