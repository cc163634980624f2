"""The program the user ran is the user's code, wherever it is installed.

A trainer installed as a package and run with ``python -m pkg.train`` (MaxText,
Levanter) is the user's program: its functions get the measured advice and its
lines are the call sites, as a script's are. Code of other installed packages
(optax, a helper library) is reported without advice, with one note that says
why, unless the user names the package (``--user-package``). memscope's own
launcher (its console script, click, the runner) is never a call site.

"Installed" is read from the interpreter's own folders (sysconfig): the tests
add a folder of their own to them, as a virtual environment's site-packages.
"""

from __future__ import annotations

import json
import os
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from memscope.cli import cli
from memscope.errors import ProgramError
from memscope.fix.plan import plan_fix
from memscope.flow import run_and_report
from memscope.program import sites
from memscope.program.runner import Script, check_script, user_code

TRAIN = """\
import jax
import jax.numpy as jnp

from helpers import normalize


@jax.jit
def step(state, batch):
    loss = jnp.mean(batch @ state["w"])
    new = jax.tree.map(lambda p: p - 0.01 * loss, state)
    return new, loss


def main():
    state = {"w": jnp.ones((256, 256)), "b": jnp.ones((256,))}
    batch = normalize(jnp.ones((8, 256)))
    for _ in range(3):
        state, loss = step(state, batch)  # CALL
    print(float(loss))


if __name__ == "__main__":
    main()
"""

HELPERS = """\
import jax

normalize = jax.jit(lambda x: x / (1.0 + x.sum()))
"""


@pytest.fixture
def installed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A folder of installed packages (as a virtual environment's site-packages)
    holding ``trainer`` and ``helpers``, importable, and a working directory
    outside it."""
    site = tmp_path / "venv" / "site-packages"
    (site / "trainer").mkdir(parents=True)
    (site / "trainer" / "__init__.py").write_text("")
    (site / "trainer" / "train.py").write_text(TRAIN)
    (site / "helpers").mkdir()
    (site / "helpers" / "__init__.py").write_text(HELPERS)
    root = os.path.realpath(site) + os.sep
    monkeypatch.setattr(sites, "_INSTALLED", (root, *sites._INSTALLED))
    # where an installed package is on sys.path: after the entry python sets for
    # the program (sys.path[0], which the runner replaces)
    monkeypatch.setattr(sys, "path", [sys.path[0], str(site), *sys.path[1:]])
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    # each test imports them afresh, as each run of python does
    for name in [m for m in sys.modules if m.split(".")[0] in ("trainer", "helpers")]:
        monkeypatch.delitem(sys.modules, name)
    yield site
    for name in [m for m in sys.modules if m.split(".")[0] in ("trainer", "helpers")]:
        del sys.modules[name]


def _line(path: Path, marker: str) -> int:
    return next(i for i, text in enumerate(path.read_text().splitlines(), start=1)
                if marker in text)


def test_an_installed_package_run_with_m_is_the_users_code(installed, capfd):
    report = run_and_report(Script("trainer.train", module=True), advise="advised")
    assert report.run is not None and report.run.exit_code == 0
    step = next(f for f in report.functions if f.name == "step")
    train = installed / "trainer" / "train.py"
    # Its own function: advice measured by compiling, as for a script's.
    assert step.library is None
    assert step.advice is not None and step.advice.add == ("state",)
    advised = step.variant("advised")
    assert advised is not None and advised.memory.peak_bytes is not None
    assert step.advice.peak_after == advised.memory.peak_bytes < step.advice.peak_before
    assert report.runtime is not None and report.runtime.overhead is not None
    assert report.runtime.overhead.variant_compiles >= 1
    # Its call sites are its own lines, never memscope's runner or the test above it.
    assert step.call_site == f"{os.path.realpath(train)}:{_line(train, '# CALL')}"
    assert step.jit_site is not None and step.jit_site.startswith(os.path.realpath(train))
    high = report.runtime.run_memory.high_water
    assert high is not None and high.line is not None
    assert high.line.startswith(os.path.realpath(train))
    # Another installed package's jit: reported, no advice, and one note says why.
    normalize = next(f for f in report.functions if f.name == "<lambda>")
    assert normalize.library == "helpers" and normalize.advice is None
    assert normalize.jit_site is None
    from memscope.views.summary import library_line

    assert library_line(report) == ("1 function jitted in installed packages (helpers 1) has "
                                    "no advice: --user-package NAME counts a package as "
                                    "your code.")
    capfd.readouterr()


def test_a_package_named_with_user_package_is_the_users_code_too(installed):
    report = run_and_report(Script("trainer.train", module=True, packages=("helpers",)),
                            advise="advised")
    normalize = next(f for f in report.functions if f.name == "<lambda>")
    assert normalize.library is None
    assert normalize.jit_site == f"{os.path.realpath(installed / 'helpers' / '__init__.py')}:3"
    from memscope.views.summary import library_line

    assert library_line(report) is None


def test_memscope_run_takes_user_package_and_refuses_an_unknown_one(installed, tmp_path):
    out = tmp_path / "r.json"
    result = CliRunner().invoke(cli, ["run", "-q", "--user-package", "helpers", "-o", str(out),
                                      "-m", "trainer.train"])
    assert result.exit_code == 0, result.output
    functions = json.loads(out.read_text())["functions"]
    assert [f["library"] for f in functions if f["name"] == "<lambda>"] == [None]
    result = CliRunner().invoke(cli, ["run", "--user-package", "no_such_pkg", "-m",
                                      "trainer.train"])
    assert result.exit_code == 2
    assert result.output.strip().splitlines() == [
        "memscope: error: --user-package no_such_pkg: no package or module 'no_such_pkg' is "
        "installed where the program would import it from"]


def test_fix_shows_the_change_for_an_installed_file_and_writes_nothing(installed):
    report = run_and_report(Script("trainer.train", module=True), advise="advised")
    train = installed / "trainer" / "train.py"
    before = train.read_text()
    found = plan_fix(report)
    assert any("installed package, not edited" in r for r in found.refusals)
    assert "donate_argnames" in found.diff or "donate_argnums" in found.diff
    assert train.read_text() == before


def test_which_files_are_the_users(installed, tmp_path):
    site = os.path.realpath(installed) + os.sep
    plain = sites.UserCode()
    trainer = sites.UserCode(roots=(site + "trainer" + os.sep,))
    assert not plain.owns(site + "trainer/train.py")
    assert trainer.owns(site + "trainer/train.py")
    assert not trainer.owns(site + "helpers/__init__.py")
    assert plain.owns(os.path.realpath(tmp_path / "work" / "script.py"))
    # A virtual environment inside the user's project is installed code still.
    project = sites.UserCode(roots=(os.path.realpath(tmp_path) + os.sep,))
    assert not project.owns(site + "helpers/__init__.py")
    # memscope's own files never are.
    assert not sites.UserCode(roots=(sites.OWN_ROOT + os.sep,)).owns(
        os.path.join(sites.OWN_ROOT, "flow.py"))
    assert user_code(Script("trainer.train", module=True)).roots == (site + "trainer" + os.sep,)
    assert user_code(Script("trainer.train", module=True, packages=("helpers.sub",))).roots[1:] \
        == (site + "helpers" + os.sep + "sub" + os.sep,)
    with pytest.raises(ProgramError, match="--user-package nope"):
        check_script(Script("trainer.train", module=True, packages=("nope",)))


def test_a_script_s_own_folder_is_the_users_even_when_installed(installed, capfd):
    script = installed / "trainer" / "run_me.py"
    script.write_text(textwrap.dedent("""\
        import jax, jax.numpy as jnp
        f = jax.jit(lambda x: x + 1)
        y = f(jnp.ones(4))  # CALL
    """))
    report = run_and_report(Script(str(script)), advise="off")
    (fn,) = report.functions
    assert fn.library is None
    assert fn.call_site == f"{os.path.realpath(script)}:3"
    capfd.readouterr()
