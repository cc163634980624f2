"""memscope as its users install it: the distribution's name, the other ``memscope``
on the package index, and .ci/package's content checks (the build itself, twine
and the wheel installed alone run in CI: .ci/package)."""

from __future__ import annotations

import importlib.util
import tomllib
import zipfile
from pathlib import Path

import pytest
from click.testing import CliRunner

from memscope.cli import cli
from memscope.version import DISTRIBUTION, __version__, sharing_the_import_name

ROOT = Path(__file__).resolve().parent.parent


def _check_dists():
    spec = importlib.util.spec_from_file_location("check_dists", ROOT / ".ci" / "check_dists.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_name_on_the_index_is_written_in_both_places():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    assert project["name"] == DISTRIBUTION == _check_dists().NAME == "jax-memscope"
    assert project["dynamic"] == ["version"]
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert f"pip install {DISTRIBUTION}" in readme


def _other_memscope(folder: Path, name: str, summary: str) -> None:
    """A distribution as pip leaves it, writing into the ``memscope`` import package."""
    info = folder / f"{name.replace('-', '_')}-0.1.2.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(
        f"Metadata-Version: 2.4\nName: {name}\nVersion: 0.1.2\nSummary: {summary}\n")
    (info / "RECORD").write_text(f"memscope/__init__.py,,\nmemscope/core.py,,\n{info.name}/METADATA,,\n")


def test_version_names_another_distribution_in_the_same_import_package(tmp_path, monkeypatch):
    assert sharing_the_import_name() == []
    _other_memscope(tmp_path, "memscope", "Analyze and simulate dynamic memory usage in C/C++ code")
    _other_memscope(tmp_path / "unrelated", "numpy-helpers", "writes no memscope files")
    (tmp_path / "unrelated" / "numpy_helpers-0.1.2.dist-info" / "RECORD").write_text("helpers/x.py,,\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.syspath_prepend(str(tmp_path / "unrelated"))
    found = sharing_the_import_name()
    assert found == ["memscope 0.1.2 (Analyze and simulate dynamic memory usage in C/C++ code)"]
    result = CliRunner().invoke(cli, ["--version"], prog_name="memscope")
    assert result.exit_code == 0
    assert result.stdout == f"memscope, version {__version__}\n"
    assert result.stderr == (
        f"memscope: {found[0]} is installed here too, into the same import package memscope, "
        "so each overwrites the other's files: pip uninstall both, then pip install jax-memscope\n")


def _wheel(path: Path, names: list[str]) -> Path:
    info = "jax_memscope-0.1.0.dist-info"
    with zipfile.ZipFile(path, "w") as z:
        for name in names:
            z.writestr(name, "")
        z.writestr(f"{info}/METADATA", "Metadata-Version: 2.4\nName: jax-memscope\n\n# memscope\n")
        z.writestr(f"{info}/entry_points.txt", "[console_scripts]\nmemscope = memscope.cli:main\n")
    return path


def test_the_wheel_check_names_what_does_not_belong_and_what_is_missing(tmp_path):
    check = _check_dists()
    files = {"memscope/__init__.py", "memscope/cli/__init__.py", "tests/test_x.py", "README.md"}
    wheel = _wheel(tmp_path / "w.whl", ["memscope/__init__.py", "tests/test_x.py",
                                        "memscope/py.typed"])
    problems = check.check_wheel(wheel, files)
    assert "w.whl holds tests/test_x.py, which is not memscope's" in problems
    assert "w.whl lacks memscope/cli/__init__.py" in problems
    assert "w.whl: entry_points.txt lacks 'memscope = memscope.pytest_plugin'" in problems
    assert "w.whl: no classifier for Python 3.11" in problems
    assert "w.whl: Requires-Python is None, not '>=3.11'" in problems


@pytest.mark.skipif(not (ROOT / ".git").exists(),
                    reason="not a git checkout (an unpacked sdist, a copy): no tracked files to list")
def test_the_manifest_takes_every_tracked_file_into_the_sdist():
    text = (ROOT / "MANIFEST.in").read_text(encoding="utf-8")
    tracked = _check_dists().tracked(ROOT)
    tops = {f.split("/")[0] for f in tracked if "/" in f}
    grafted = {line.split()[1] for line in text.splitlines() if line.startswith("graft ")}
    assert tops <= grafted, tops - grafted
    included = {w for line in text.splitlines() if line.startswith("include ")
                for w in line.split()[1:]}
    assert {f for f in tracked if "/" not in f} - {".gitignore"} <= included
