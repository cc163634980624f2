"""A reader that goes away after the first line (``memscope show r.json | head -1``)
ends memscope's printing, not the command: the files it writes are written and
its exit code is the one it has without the pipe (issue 66)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.samples import SAMPLES

pytestmark = pytest.mark.end_to_end

PRINTS = Path(__file__).resolve().parent / "programs" / "prints_lines.py"


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
    code, line, err = _piped(["run", "-o", "r.json", "--html", "r.html",
                              str(SAMPLES / "forgot_to_donate.py")], tmp_path)
    assert code == 0, err
    assert line  # the program's first line, as python would print it
    assert json.loads((tmp_path / "r.json").read_text())["functions"]
    assert (tmp_path / "r.html").read_text().rstrip().endswith("</html>")


def test_a_program_printing_into_a_closed_pipe_meets_it_as_under_python(
        tmp_path: Path) -> None:
    # 50000 lines: more than a pipe holds, so the program's own print meets the
    # closed pipe; that is the program's ending, as python gives it, and the
    # report is still written.
    python = subprocess.Popen([sys.executable, str(PRINTS)], cwd=tmp_path,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    head = subprocess.run(["head", "-1"], stdin=python.stdout, capture_output=True,
                          text=True, check=True)
    assert python.stdout is not None
    python.stdout.close()
    _, python_err = python.communicate(timeout=300)
    code, line, err = _piped(["run", "-o", "r.json", str(PRINTS)], tmp_path)
    assert line == head.stdout == "line 0: 2.0\n"
    assert code == python.returncode != 0, err
    assert python_err.decode().splitlines()[-1] in err.splitlines()  # BrokenPipeError
    report = json.loads((tmp_path / "r.json").read_text())
    assert report["run"]["outcome"] == "failed"
    assert report["run"]["error"].startswith("BrokenPipeError")
    assert [f["name"] for f in report["functions"]] == ["<lambda>"]


def _closed(args: list[str], cwd: Path) -> tuple[int, str]:
    """``memscope ARGS`` with a stdout whose reader is gone before it starts (a
    reader that leaves at once): its exit code and its stderr."""
    read, write = os.pipe()
    os.close(read)
    try:
        done = subprocess.run([sys.executable, "-m", "memscope", *args], cwd=cwd,
                              stdout=write, stderr=subprocess.PIPE, text=True, timeout=300)
    finally:
        os.close(write)
    return done.returncode, done.stderr


#: Every command that prints, with the file it writes ({out}): show (with its
#: HTML page), diff, a failing check with its JUnit XML, fit, fix's advised
#: edit, the help and the version.
COMMANDS = {
    "show": ["show", "--detail", "--leaves", "a.json"],
    "show-markdown": ["show", "--format", "markdown", "a.json"],
    "show-html": ["show", "--html", "{out}", "a.json"],
    "diff": ["diff", "-o", "{out}", "a.json", "b.json"],
    "check": ["check", "--baseline", "b.json", "--report", "a.json", "--junit-xml", "{out}"],
    "fit": ["fit", "--memory", "64MiB", str(SAMPLES / "forgot_to_donate.py")],
    "fix": ["fix", str(SAMPLES / "forgot_to_donate.py")],
    "help": ["--help"],
    "version": ["--version"],
    "show-help": ["show", "--help"],
}


@pytest.mark.parametrize("name", list(COMMANDS))
def test_a_reader_gone_before_the_first_line_changes_nothing(report: Path, name: str) -> None:
    def args(out: str) -> list[str]:
        return [a.replace("{out}", out) for a in COMMANDS[name]]

    plain = subprocess.run([sys.executable, "-m", "memscope", *args(f"{name}-plain")],
                           cwd=report.parent, stdout=subprocess.DEVNULL,
                           stderr=subprocess.PIPE, text=True, timeout=300)
    code, err = _closed(args(f"{name}-closed"), report.parent)
    # the exit code and stderr it has without the pipe (check's is 1: a failure)
    assert (code, err) == (plain.returncode, plain.stderr)
    if "{out}" in COMMANDS[name]:
        written = (report.parent / f"{name}-closed").read_text()
        assert written == (report.parent / f"{name}-plain").read_text().replace(
            f"{name}-plain", f"{name}-closed")
