"""A reader that goes away after the first line (``memscope show r.json | head -1``)
ends memscope's printing, not the command: the files it writes are written and
its exit code is the one it has without the pipe (issue 66)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.samples import SAMPLES

pytestmark = pytest.mark.end_to_end


def _piped(args: list[str], cwd: Path) -> tuple[int, str, str]:
    """``memscope ARGS | head -1``: memscope's exit code, the line head printed,
    memscope's stderr."""
    memscope = subprocess.Popen([sys.executable, "-m", "memscope", *args], cwd=cwd,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    head = subprocess.run(["head", "-1"], stdin=memscope.stdout, capture_output=True,
                          text=True, check=True)
    assert memscope.stdout is not None
    memscope.stdout.close()  # only head reads it, as in a shell's pipe
    _, err = memscope.communicate(timeout=300)
    return memscope.returncode, head.stdout, err.decode()


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("pipe")
    for name, sample in (("a.json", "forgot_to_donate.py"), ("b.json", "unusable_donation.py")):
        subprocess.run([sys.executable, "-m", "memscope", "run", "-q", "-o", name,
                        str(SAMPLES / sample)], cwd=folder, check=True, capture_output=True)
    return folder / "a.json"


def test_show_into_a_closed_pipe_exits_as_without_it(report: Path) -> None:
    # --leaves prints a line per buffer: more than a pipe holds before head goes.
    code, line, err = _piped(["show", "--detail", "--leaves", report.name], report.parent)
    assert (code, line, err) == (0, "memscope report\n", "")


def test_diff_into_a_closed_pipe_still_writes_its_json(report: Path) -> None:
    # two programs' reports: more lines than a pipe holds before head goes
    out, other = report.parent / "d.json", "b.json"
    code, line, err = _piped(["diff", "-o", out.name, report.name, other], report.parent)
    plain = subprocess.run([sys.executable, "-m", "memscope", "diff", "-o", "plain.json",
                            report.name, other], cwd=report.parent, capture_output=True)
    assert (code, err) == (plain.returncode, "")
    assert line == f"{report.name} -> {other}\n"
    written = json.loads(out.read_text())
    assert written == json.loads((report.parent / "plain.json").read_text())


def test_run_into_a_closed_pipe_writes_its_report(tmp_path: Path) -> None:
    code, line, err = _piped(["run", "-o", "r.json", str(SAMPLES / "forgot_to_donate.py")],
                             tmp_path)
    assert code == 0, err
    assert line  # the program's first line, as python would print it
    assert json.loads((tmp_path / "r.json").read_text())["functions"]
