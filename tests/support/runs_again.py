"""A ``memscope run --target`` made twice on one compile cache, held to the
first: the tests of each target kind (tests/test_tpu_target.py, test_gpu_target.py)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any


def run_twice_on_one_cache(run: Callable[[str], Any], folder: Path) -> list[dict]:
    """``run(name)`` (a ``memscope run -o name`` in ``folder``, its compile cache
    kept between the two) made twice: the second compiles nothing for the target,
    reads every compile the first made, and reports the same. The two reports'
    functions (without ``runtime`` and compile seconds)."""
    reports = []
    for name in ("first.json", "again.json"):
        done = run(name)
        assert done.returncode == 0, done.stderr[-3000:]
        reports.append(json.loads((folder / name).read_text()))
    first, again = (r["runtime"]["overhead"] for r in reports)
    assert first["target_compiles"] >= 1 + first["variant_compiles"]
    assert again["target_compiles"] == 0
    assert again["target_cache_hits"] == first["target_compiles"] + first["target_cache_hits"]
    for report in reports:
        del report["runtime"]
        for function in report["functions"]:
            function.pop("compile_seconds", None)
    assert reports[1] == reports[0]
    return reports[0]["functions"]
