"""Every ``memscope`` a benchmark times runs as a program's first run does: with
memscope's cache of its variants' compiles (memscope.compiled.cache) empty, a new
one for each run, removed at exit. ``bench_short.py`` times a run again beside it.

And as installed: ``pip install`` compiles a package's modules to bytecode, but an
editable install under ``PYTHONDONTWRITEBYTECODE`` (this project's machines set
it) would compile memscope's sources again in every timed run, about 0.1 s that
no user's ``memscope`` pays. So memscope's bytecode is written once, first.
"""

from __future__ import annotations

import atexit
import compileall
import functools
import importlib.util
import json
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path


def first_run_env(cache: str | None = None, **extra: str) -> dict[str, str]:
    """The environment for one timed run: this one, memscope's cache in the
    folder ``cache`` (by default a new, empty one), and ``extra``."""
    _bytecode()
    if cache is None:
        cache = tempfile.mkdtemp(prefix="memscope-cache-")
        atexit.register(shutil.rmtree, cache, ignore_errors=True)
    env = {k: v for k, v in os.environ.items() if k != "MEMSCOPE_CACHE"}
    return {**env, "MEMSCOPE_CACHE_DIR": cache, **extra}


@functools.cache
def _bytecode() -> None:
    """memscope's modules compiled to bytecode, as ``pip install`` leaves them."""
    spec = importlib.util.find_spec("memscope")
    if spec is not None and spec.origin is not None:
        compileall.compile_dir(Path(spec.origin).parent, quiet=1)


def timed_json(command: list[str], cache: str | None = None) -> tuple[float, dict]:
    """Run a memscope command that prints JSON (``fit --format json``) as a first
    run (:func:`first_run_env`, memscope's cache in ``cache``): its wall time and
    its JSON. Exit 0 or 1 (no batch fits) is an answer; anything else fails."""
    start = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True,
                          env=first_run_env(cache, PYTHONWARNINGS="ignore"))
    wall = time.perf_counter() - start
    if done.returncode not in (0, 1):
        raise SystemExit(f"failed: {' '.join(command)}\n{done.stderr[-2000:]}")
    return wall, json.loads(done.stdout)
