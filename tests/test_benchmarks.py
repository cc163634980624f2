"""The benchmark scripts run and print what they promise (no timing is asserted)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_bench_buffers_prints_the_ratio_at_a_tiny_size():
    env = {**os.environ, "JAX_PLATFORMS": "cpu"}
    result = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "bench_buffers.py"), "--layers", "2",
         "--width", "8", "--repeat", "1"],
        capture_output=True, text=True, timeout=120, env=env, check=False)
    assert result.returncode == 0, result.stderr
    assert re.search(r"^optimized module: \d+ instructions", result.stdout, re.M)
    assert "reconciled with XLA: True" in result.stdout
    assert re.search(r"^ratio decode / compile: \d+\.\d{4} ", result.stdout, re.M), result.stdout
