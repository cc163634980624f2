"""Every ``memscope`` a benchmark times runs as a program's first run does: with
memscope's cache of its variants' compiles (memscope.variants.cache) empty, a new
one for each run, removed at exit. ``bench_short.py`` times a run again beside it."""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile


def first_run_env(cache: str | None = None, **extra: str) -> dict[str, str]:
    """The environment for one timed run: this one, memscope's cache in the
    folder ``cache`` (by default a new, empty one), and ``extra``."""
    if cache is None:
        cache = tempfile.mkdtemp(prefix="memscope-cache-")
        atexit.register(shutil.rmtree, cache, ignore_errors=True)
    env = {k: v for k, v in os.environ.items() if k != "MEMSCOPE_CACHE"}
    return {**env, "MEMSCOPE_CACHE_DIR": cache, **extra}
