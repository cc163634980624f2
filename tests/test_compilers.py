"""XLA's compilers for ``--target`` kept apart from JAX (memscope.compiled.targets.compilers).

Installed into the Python environment (JAX's ``tpu`` and ``cuda13-local``
extras), libtpu and JAX's CUDA plugin are loaded by JAX into every program: on a
machine without the accelerator each plain JAX program prints their errors.
memscope keeps them in a folder of its own and loads them into its own process
only. Here: the pins are JAX's own, an install is whole or absent, and where
memscope's folder holds a compiler, a plain JAX program prints nothing and
runs on the CPU, as without it.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import jaxlib
import pytest

from memscope.compiled.targets import compilers
from memscope.compiled.targets.base import TargetSetupError


def test_the_pins_are_the_ones_jaxs_own_extras_name() -> None:
    cuda, tpu = compilers.kept_compiler("cuda"), compilers.kept_compiler("tpu")
    assert cuda.requirements == (f"jax-cuda13-plugin=={jaxlib.__version__}",
                                 "nvidia-cuda-nvcc>=13")
    (libtpu,) = tpu.requirements
    assert libtpu.startswith("libtpu==") and libtpu.removeprefix("libtpu==")[0].isdigit()
    assert cuda.folder.name == f"jax-cuda13-plugin-{jaxlib.__version__}"
    assert cuda.library.name == "xla_cuda_plugin.so" and tpu.library.name == "libtpu.so"


def _fake_pip(monkeypatch: pytest.MonkeyPatch, calls: list[Path], *, fails: bool = False
              ) -> None:
    """pip replaced by a command that writes the library where pip would (or fails)."""
    def command(c: compilers.Compiler, target: Path, *, quiet: bool = True) -> list[str]:
        calls.append(target)
        made = target / c.library.relative_to(c.folder)
        return [sys.executable, "-c", "import sys; sys.exit('no index has it')" if fails else
                f"import pathlib; p = pathlib.Path({str(made)!r}); "
                "p.parent.mkdir(parents=True); p.write_bytes(b'so')"]
    monkeypatch.setattr(compilers, "install_command", command)


def test_an_install_is_made_apart_then_moved_whole_and_made_once(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MEMSCOPE_COMPILERS_DIR", str(tmp_path))
    c = compilers.kept_compiler("tpu")
    calls: list[Path] = []
    _fake_pip(monkeypatch, calls)
    assert not c.installed
    assert compilers.install(c) == c.library and c.installed
    assert calls[0].parent == tmp_path and calls[0] != c.folder  # made apart, then moved
    assert sorted(p.name for p in tmp_path.iterdir()) == [c.folder.name]  # nothing left over
    _fake_pip(monkeypatch, calls, fails=True)
    assert compilers.install(c) == c.library and len(calls) == 1  # once


def test_a_failed_install_leaves_nothing_and_says_how_in_one_line(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MEMSCOPE_COMPILERS_DIR", str(tmp_path))
    c = compilers.kept_compiler("cuda")
    monkeypatch.setattr(compilers, "install_command", lambda c, target, quiet=True: (
        [sys.executable, "-c", "import sys; sys.exit('no index has it')"] if quiet else
        ["pip", "install", "--target", str(target), *c.requirements]))
    with pytest.raises(TargetSetupError) as raised:
        compilers.install(c)
    (line,) = str(raised.value).splitlines()
    # the command to type by hand: into the folder itself, and not quiet
    assert line.endswith(f'pip install --target {c.folder} "{c.requirements[0]}" '
                         f'"{c.requirements[1]}" && touch {c.folder / ".memscope-complete"}')
    assert line.startswith("memscope could not install XLA:GPU's compiler (JAX's CUDA "
                           "plugin, with ptxas) (no index has it); to install it by hand: ")
    assert not c.folder.exists() and list(tmp_path.iterdir()) == []


KEPT = [kind for kind in ("tpu", "cuda")
        if compilers.kept_compiler(kind).installed and not compilers.in_environment(kind)]


@pytest.mark.skipif(not KEPT, reason="no compiler in memscope's folder alone "
                    "(memscope install-compiler tpu|gpu), or one in the environment too")
def test_a_plain_jax_program_is_quiet_and_on_the_cpu_beside_memscopes_compilers() -> None:
    """What installing the compilers must not change: a JAX program with no
    memscope in it prints nothing of theirs, finds no TPU or CUDA platform, and
    runs on the CPU."""
    program = ("import importlib.util, jax, jax.numpy as jnp\n"
               "print(float(jnp.ones(4).sum()), jax.default_backend(),\n"
               "      importlib.util.find_spec('libtpu') is None)\n")
    done = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True,
                          timeout=300, env={k: v for k, v in os.environ.items()
                                            if k != "JAX_PLATFORMS"})
    assert done.returncode == 0, done.stderr
    assert done.stdout == "4.0 cpu True\n" and done.stderr == ""
