"""What ``memscope bisect`` costs, beside finding the same release by hand.

On tests/programs/bisect_transformer.py (a scanned, checkpointed transformer
step whose XLA:CPU temporaries grew between JAX 0.10.1 and 0.10.2), over a
range of releases (default 0.9.0..0.10.2, seven releases), in one invocation:

- ``memscope bisect`` with its folder of environments empty (every environment
  it tries built; uv's own download cache as the machine has it), then again
  (every environment kept);
- by hand, as a user without memscope does it: for every release in the
  range, a virtual environment with ``python -m venv`` and ``pip install
  jax==V jaxlib==V``, and the step's ``memory_analysis()`` printed from
  ``jax.jit(...).lower(...).compile()`` (what the user compares by eye; no
  roles, no source lines, no pass).

Prints, per way: environments built, releases tried, wall seconds, and
whether it found the same pair. No figure here is asserted by the test suite.

    python -m benchmarks.bench_bisect [--range 0.9.0..0.10.2] [--skip-by-hand]
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PROGRAM = ROOT / "tests" / "programs" / "bisect_transformer.py"
PROBE = """
import importlib.util, sys
spec = importlib.util.spec_from_file_location("program", sys.argv[1])
program = importlib.util.module_from_spec(spec)
spec.loader.exec_module(program)
import jax
m = program.train_step.lower(program.init(jax.random.key(0)), program.batch(0)).compile(
    ).memory_analysis()
print(jax.__version__, m.temp_size_in_bytes)
"""


def memscope_bisect(rng: str, environments: Path, out: Path) -> dict:
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "memscope", "bisect", "--jax", rng,
                           "-o", str(out), str(PROGRAM)], capture_output=True, text=True,
                          env={**os.environ, "MEMSCOPE_ENVIRONMENTS_DIR": str(environments)})
    wall = time.monotonic() - started
    if done.returncode != 0:
        raise SystemExit(f"memscope bisect failed:\n{done.stderr[-2000:]}")
    found = json.loads(out.read_text())
    moves = [(m["previous"], m["release"]) for m in found["first_moved"]]
    return {"wall_s": wall, "built": found["environments_built"],
            "reused": found["environments_reused"], "tried": len(found["tried"]),
            "releases": len(found["releases"]), "moves": moves}


def by_hand(releases: list[str], folder: Path) -> dict:
    started = time.monotonic()
    temps = {}
    python = getattr(sys, "_base_executable", sys.executable)
    for release in releases:
        env = folder / release
        subprocess.run([python, "-m", "venv", str(env)], check=True)
        subprocess.run([str(env / "bin" / "pip"), "install", "-q", "--disable-pip-version-check",
                        f"jax=={release}", f"jaxlib=={release}"], check=True)
        done = subprocess.run([str(env / "bin" / "python"), "-c", PROBE, str(PROGRAM)],
                              capture_output=True, text=True, check=True,
                              env={**os.environ, "JAX_PLATFORMS": "cpu"})
        temps[release] = int(done.stdout.split()[-1])
    wall = time.monotonic() - started
    moves = [(a, b) for a, b in itertools.pairwise(releases) if temps[a] != temps[b]]
    return {"wall_s": wall, "built": len(releases), "reused": 0, "tried": len(releases),
            "releases": len(releases), "moves": moves}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--range", default="0.9.0..0.10.2")
    parser.add_argument("--skip-by-hand", action="store_true")
    options = parser.parse_args()
    from memscope.bisect.releases import Range, index_versions

    releases = Range.parse(options.range).select(index_versions("jax"))
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench-bisect-") as tmp:
        folder = Path(tmp)
        rows.append(("memscope bisect, no environment kept",
                     memscope_bisect(options.range, folder / "envs", folder / "a.json")))
        rows.append(("memscope bisect again, environments kept",
                     memscope_bisect(options.range, folder / "envs", folder / "b.json")))
        shutil.rmtree(folder / "envs")
        if not options.skip_by_hand:
            rows.append(("by hand: venv + pip + compile, every release",
                         by_hand(releases, folder / "hand")))
    print(f"range {options.range}: {len(releases)} releases ({', '.join(releases)})")
    print(f"{'way':48} {'built':>5} {'tried':>5} {'seconds':>8}  moves found")
    for name, r in rows:
        moves = ", ".join(f"{a} -> {b}" for a, b in r["moves"]) or "none"
        print(f"{name:48} {r['built']:>5} {r['tried']:>5} {r['wall_s']:>8.1f}  {moves}")


if __name__ == "__main__":
    main()
