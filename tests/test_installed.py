"""memscope installed as a user installs it (not editable) runs a pytest suite
that treats warnings as errors, as ``python -m pytest`` does.

pytest marks an installed plugin's package for assertion rewriting; memscope is
imported before pytest starts, and the warning that it cannot be rewritten would
end, under ``filterwarnings = error``, every suite run under ``memscope run``.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.inner_pytest import only_memscope_plugin

ROOT = Path(__file__).resolve().parent.parent


def _has_setuptools(major: int) -> bool:
    try:
        version = importlib.metadata.version("setuptools")
    except importlib.metadata.PackageNotFoundError:
        return False
    return int(version.split(".")[0]) >= major


def test_memscope_run_pytest_with_warnings_as_errors_from_a_plain_install(
        tmp_path: Path) -> None:
    if importlib.util.find_spec("pip") is None:  # CI's older series: environments made by uv
        pytest.skip("this environment has no pip to install memscope with")
    site = tmp_path / "site"
    # Build with the setuptools this environment has, where it is new enough:
    # then no package registry is needed (a machine without network, say).
    isolation = ["--no-build-isolation"] if _has_setuptools(77) else []
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps",
                    "--no-compile", *isolation, "--target", str(site), str(ROOT)],
                   check=True, capture_output=True, timeout=600)
    # The installed metadata bounds JAX from below only: pip never moves a newer JAX.
    (info,) = site.glob("jax_memscope-*.dist-info")
    requires = importlib.metadata.PathDistribution(info).requires or []
    jax_requires = [r for r in requires if r.split(">")[0].split("<")[0] in ("jax", "jaxlib")]
    assert sorted(jax_requires) == ["jax>=0.7", "jaxlib>=0.7"], requires
    project = tmp_path / "project"
    project.mkdir()
    (project / "pytest.ini").write_text("[pytest]\nfilterwarnings = error\n")
    (project / "test_one.py").write_text(
        "import jax, jax.numpy as jnp\n\n"
        "def test_double():\n"
        "    assert jax.jit(lambda x: x * 2)(jnp.ones(3)).sum() == 6\n")
    env = {**os.environ, "PYTHONPATH": str(site), "JAX_PLATFORMS": "cpu"}
    command = ["-m", "pytest", "-q", "-p", "no:cacheprovider", *only_memscope_plugin()]
    plain = subprocess.run([sys.executable, *command], cwd=project, env=env,
                           capture_output=True, text=True, timeout=300)
    measured = subprocess.run([sys.executable, "-m", "memscope", "run", "-q", *command],
                              cwd=project, env=env, capture_output=True, text=True,
                              timeout=300)
    assert plain.returncode == 0, plain.stdout + plain.stderr
    assert measured.returncode == 0, measured.stdout + measured.stderr
    assert "1 passed" in measured.stdout
