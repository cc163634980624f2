"""Out of memory under ``memscope run``: the program meets JAX's own error, as under python.

The program asks XLA:CPU for an output larger than the machine (RAM and swap),
which fails at once, before a page is touched. Where the kernel would grant
any size (overcommit mode 1), the test is skipped: nothing here may really
exhaust the machine.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from memscope.report import load_report
from tests.support.cli import MEMSCOPE
from tests.support.samples import SAMPLES

PROGRAM = Path(__file__).parent / "programs" / "oom_async.py"
EXPAND = Path(__file__).parent / "programs" / "oom_expand.py"
QUIET = {**os.environ, "PYTHONWARNINGS": "ignore"}


def _machine_bytes() -> int:
    fields = dict(line.split(":", 1) for line in Path("/proc/meminfo").read_text().splitlines())
    return sum(int(fields[k].split()[0]) * 1024 for k in ("MemTotal", "SwapTotal"))


def too_large() -> int:
    """Bytes no allocation can get here: 4 times RAM and swap, at least 1 TiB."""
    overcommit = Path("/proc/sys/vm/overcommit_memory")
    if not overcommit.exists() or overcommit.read_text().strip() == "1":
        pytest.skip("the kernel may grant any allocation here (overcommit mode 1)")
    return max(4 * _machine_bytes(), 1 << 40)


def _both(*args: str, tmp_path: Path) -> tuple[subprocess.CompletedProcess[str], ...]:
    plain = subprocess.run([sys.executable, str(PROGRAM), *args], capture_output=True,
                           text=True, env=QUIET, timeout=300)
    measured = subprocess.run([MEMSCOPE, "run", "-q", "-o", str(tmp_path / "r.json"),
                               str(PROGRAM), *args], capture_output=True, text=True,
                              env=QUIET, timeout=300)
    return plain, measured


@pytest.mark.parametrize("catch", [True, False])
def test_a_pending_call_that_runs_out_of_memory_fails_as_under_python(tmp_path, catch):
    args = (str(too_large()), "--pending", *(("--catch",) if catch else ()))
    plain, measured = _both(*args, tmp_path=tmp_path)
    assert "input ready: False" in plain.stdout  # the case that aborted memscope
    # JAX 0.7 words the late failure "INTERNAL: Buffer Definition Event: ... Out of memory"
    assert "grow returned" in plain.stdout and "Out of memory allocating" in plain.stdout
    assert measured.returncode == plain.returncode == (0 if catch else 1), measured.stderr
    assert measured.stdout == plain.stdout
    assert "Check failed" not in measured.stderr
    if not catch:
        assert plain.stderr.splitlines()[-3] in measured.stderr  # JAX's own error line


def test_a_call_that_raises_out_of_memory_fails_as_under_python(tmp_path):
    plain, measured = _both(str(too_large()), tmp_path=tmp_path)
    assert "Out of memory allocating" in plain.stdout and "grow returned" not in plain.stdout
    assert measured.returncode == plain.returncode == 1
    assert measured.stdout == plain.stdout


def _grow_output_bytes(size: int) -> int:
    """What XLA compiles grow's output to: the ground truth for the failed allocation."""
    import jax
    import jax.numpy as jnp

    compiled = jax.jit(lambda x: jnp.zeros((size // 4,), jnp.float32) + x[0]).lower(
        jax.ShapeDtypeStruct((1,), jnp.float32)).compile()
    return int(compiled.memory_analysis().output_size_in_bytes)


@pytest.mark.parametrize("pending", [False, True])
def test_the_report_opens_with_the_post_mortem(tmp_path, pending):
    size = too_large()
    args = (str(size), *(("--pending",) if pending else ()))
    plain, measured = _both(*args, tmp_path=tmp_path)
    assert measured.returncode == plain.returncode == 1
    report = load_report(str(tmp_path / "r.json"))
    (grow,) = [fn for fn in report.functions if fn.name == "grow"]
    o = grow.out_of_memory
    assert o is not None and o.failed_in == "call"
    assert o.requested_bytes == _grow_output_bytes(size) == grow.memory.output_bytes
    assert "Out of memory allocating" in o.error
    largest = o.largest_buffers[0]
    line = next(i for i, text in enumerate(PROGRAM.read_text().splitlines(), 1)
                if "jnp.zeros" in text)
    assert largest.bytes == o.requested_bytes and largest.source.endswith(f":{line}")
    # The failed output holds no memory: the live arrays are the program's others.
    assert o.live_arrays is not None and o.live_arrays.total_bytes < o.requested_bytes
    assert [fn.out_of_memory is not None for fn in report.functions].count(True) == 1
    shown = subprocess.run([MEMSCOPE, "show", str(tmp_path / "r.json")], capture_output=True,
                           text=True, env=QUIET, timeout=120).stdout
    first = shown.split("\n\n")[1]  # after the header: the post-mortem comes first
    assert first.startswith("OUT OF MEMORY: grow") and "largest buffers" in first


def test_an_output_allocated_when_the_call_runs_fails_as_under_python(tmp_path):
    """The issue's program: the call's input is ready, its output too large. Under
    python JAX raises its out-of-memory error when the result is read; under
    memscope the same, with the post-mortem naming the function (on jaxlib 0.10
    memscope once aborted the process reading the output's address)."""
    columns = too_large() // (4096 * 4)
    plain = subprocess.run([sys.executable, str(EXPAND), str(columns)], capture_output=True,
                           text=True, env=QUIET, timeout=300)
    out = tmp_path / "oom.json"
    measured = subprocess.run([MEMSCOPE, "run", "-q", "-o", str(out), str(EXPAND), str(columns)],
                              capture_output=True, text=True, env=QUIET, timeout=300)
    assert plain.returncode == 1 and "Out of memory allocating" in plain.stderr
    assert measured.returncode == plain.returncode, measured.stderr[-2000:]
    assert measured.stdout == plain.stdout
    assert "Check failed" not in measured.stderr
    error = plain.stderr.strip().splitlines()[-1]  # JAX's error line, as each series words it
    assert "Out of memory allocating" in error and error in measured.stderr
    report = load_report(str(out))
    failed = [fn for fn in report.functions if fn.out_of_memory is not None]
    assert [fn.name for fn in failed] == ["expand"]
    o = failed[0].out_of_memory
    assert o.requested_bytes == 4096 * columns * 4 == failed[0].memory.output_bytes
    assert "Out of memory allocating" in o.error


#: A safety net for the child: no mapping beyond 16 GiB, whatever the kernel allows
#: (set by the shell: a preexec_fn would fork a process that runs JAX's threads).
LIMITED = ["sh", "-c", 'ulimit -v 16777216 && exec "$@"', "sh"]


def test_the_transformer_post_mortem_names_its_largest_buffers(tmp_path):
    # A batch whose temporaries (about 1.5 TiB) no machine here can allocate.
    batch = str(max(too_large() // (8 << 20), 200_000))
    out = tmp_path / "r.json"
    done = subprocess.run([*LIMITED, MEMSCOPE, "run", "-q", "--no-advice", "-o", str(out),
                           str(SAMPLES / "transformer_adam.py"), "--batch", batch,
                           "--steps", "2"], capture_output=True, text=True, env=QUIET,
                          timeout=600)
    assert done.returncode == 1 and "Out of memory allocating" in done.stderr
    report = load_report(str(out))
    (step,) = [fn for fn in report.functions if fn.out_of_memory is not None]
    assert step.name == "train_step" and step.out_of_memory.failed_in == "call"
    # XLA:CPU allocates all temporaries as one block: the size memory_analysis() gives.
    assert step.out_of_memory.requested_bytes == step.memory.temp_bytes
    sources = {b.source.split(":")[0] for b in step.out_of_memory.largest_buffers}
    assert sources and all((SAMPLES.parent / s).resolve() == SAMPLES / "transformer_adam.py"
                           or s == str(SAMPLES / "transformer_adam.py") for s in sources)
