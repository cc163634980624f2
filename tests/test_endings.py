"""Hostile endings: each script runs under python and under `memscope run`, and must
give the same program output and exit status, with a readable report where promised.

The ground truth is the interpreter itself: every expectation is what ``python
SCRIPT`` did in the same test, never a hard-coded figure.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from memscope.flow import run_and_report
from memscope.program.runner import Script
from memscope.report import load_report
from tests.support.cli import MEMSCOPE, PROGRAM_ENV

JITTED = """\
import jax, jax.numpy as jnp
step = jax.jit(lambda x: x * 2)
step(jnp.ones(4))
"""


def script(folder: Path, body: str, name: str = "target.py") -> Path:
    path = folder / name
    parts = body.split(JITTED)  # the shared lines are not indented; the rest may be
    path.write_text(JITTED.join(textwrap.dedent(part) for part in parts))
    return path


def both(path: Path, *args: str, cwd: Path | None = None, options: tuple[str, ...] = (),
         report: Path | None = None) -> tuple[subprocess.CompletedProcess[str],
                                               subprocess.CompletedProcess[str]]:
    """``python path args`` and ``memscope run -q [-o report] options path args``."""
    folder = cwd or path.parent
    plain = subprocess.run([sys.executable, str(path), *args], cwd=folder, env=PROGRAM_ENV,
                           capture_output=True, text=True, timeout=120)
    saved = ("-o", str(report)) if report is not None else ()
    measured = subprocess.run([MEMSCOPE, "run", "-q", *saved, *options, str(path), *args],
                              cwd=folder, env=PROGRAM_ENV, capture_output=True, text=True,
                              timeout=300)
    return plain, measured


def test_main_module_is_set_up_as_python_does(tmp_path: Path) -> None:
    path = script(tmp_path, JITTED + """\
        import os, sys
        print(__file__, __spec__, type(__loader__).__name__, __cached__, __package__)
        print(sys.modules["__main__"].__dict__ is globals(), sys.argv, sys.path[0])
        os.chdir(os.path.dirname(__file__) + "/sub")
        print(open(__file__).read() == open(os.path.join("..", "target.py")).read())
    """)
    (tmp_path / "sub").mkdir()
    plain, measured = both(path, "a b", cwd=tmp_path)
    assert plain.returncode == 0, plain.stderr
    assert (measured.returncode, measured.stdout) == (0, plain.stdout)


def test_module_main_is_set_up_as_python_dash_m(tmp_path: Path) -> None:
    package = tmp_path / "pkg_endings"
    package.mkdir()
    (package / "__init__.py").write_text("")
    script(package, JITTED + "print(__file__, __spec__.name, __package__, __cached__)\n",
           name="__main__.py")
    plain = subprocess.run([sys.executable, "-m", "pkg_endings"], cwd=tmp_path, env=PROGRAM_ENV,
                           capture_output=True, text=True, timeout=120)
    measured = subprocess.run([MEMSCOPE, "run", "-q", "-m", "pkg_endings"], cwd=tmp_path,
                              env=PROGRAM_ENV, capture_output=True, text=True, timeout=300)
    assert plain.returncode == 0, plain.stderr
    assert (measured.returncode, measured.stdout) == (0, plain.stdout)


@pytest.mark.parametrize("code", ["256", "True", "-1", "2**70", "'bye'", "False"])
def test_sys_exit_gives_python_s_exit_status_and_an_int_in_the_report(
        tmp_path: Path, code: str) -> None:
    path = script(tmp_path, JITTED + f"import sys\nsys.exit({code})\n")
    report = tmp_path / "r.json"
    plain, measured = both(path, report=report)
    assert measured.returncode == plain.returncode
    assert measured.stderr.endswith(plain.stderr)
    run = json.loads(report.read_text())["run"]
    assert type(run["exit_code"]) is int and run["exit_code"] == plain.returncode
    assert run["outcome"] == ("completed" if plain.returncode == 0 else "failed")
    assert load_report(str(report)).run.exit_code == plain.returncode  # show/check read it


def test_sigterm_writes_the_report_then_dies_of_sigterm_like_python(tmp_path: Path) -> None:
    path = script(tmp_path, JITTED + """\
        import os, signal, time
        print("before", flush=True)
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(30)
        print("never")
    """)
    report = tmp_path / "r.json"
    plain, measured = both(path, report=report)
    assert plain.returncode == -signal.SIGTERM
    assert (measured.returncode, measured.stdout) == (plain.returncode, plain.stdout)
    saved = load_report(str(report))
    assert saved.run.outcome == "interrupted"
    assert saved.run.exit_code == 128 + signal.SIGTERM
    assert [fn.calls for fn in saved.functions] == [1]


def test_signals_while_the_report_is_written_wait_for_it(tmp_path: Path) -> None:
    path = script(tmp_path, JITTED)
    written = []

    def deliver(report: object) -> None:
        os.kill(os.getpid(), signal.SIGINT)  # Ctrl-C right as the report is written
        written.append(report)

    with pytest.raises(SystemExit) as ended:
        run_and_report(Script(str(path)), deliver=deliver)
    assert ended.value.code == 130
    assert len(written) == 1
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_a_forked_child_does_not_write_the_parent_s_report(tmp_path: Path) -> None:
    report = tmp_path / "r.json"
    path = script(tmp_path, """\
        import os, sys
        pid = os.fork()
        if pid == 0:
            print("child", flush=True)
            sys.exit(7)
        _, status = os.waitpid(pid, 0)
        print("child exit", os.waitstatus_to_exitcode(status), "report",
              os.path.exists(sys.argv[1]))
    """ + JITTED)
    plain, measured = both(path, str(report), report=report)
    assert plain.stdout.splitlines()[-1] == "child exit 7 report False"
    assert (measured.returncode, measured.stdout) == (0, plain.stdout)
    assert load_report(str(report)).run.outcome == "completed"


def test_memscope_prints_on_the_stdout_it_started_with(tmp_path: Path) -> None:
    path = script(tmp_path, JITTED + """\
        import sys
        sys.stdout = open("user.log", "w")
        print("to the log")
    """)
    done = subprocess.run([MEMSCOPE, "run", str(path)], cwd=tmp_path, env=PROGRAM_ENV,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "user.log").read_text() == "to the log\n"
    assert "<lambda>" in done.stdout


def test_a_target_that_closes_stdout_still_gets_its_report(tmp_path: Path) -> None:
    path = script(tmp_path, JITTED + "import sys\nprint('bye')\nsys.stdout.close()\n")
    report = tmp_path / "r.json"
    plain = subprocess.run([sys.executable, str(path)], env=PROGRAM_ENV, capture_output=True,
                           text=True, timeout=120)
    done = subprocess.run([MEMSCOPE, "run", "-o", str(report), str(path)], cwd=tmp_path,
                          env=PROGRAM_ENV, capture_output=True, text=True, timeout=300)
    assert done.returncode == plain.returncode == 0, done.stderr
    assert done.stdout.startswith(plain.stdout) and "<lambda>" in done.stdout
    assert [fn.name for fn in load_report(str(report)).functions] == ["<lambda>"]


@pytest.mark.parametrize("code", [0, 3])
def test_a_reader_that_goes_away_keeps_the_exit_code(tmp_path: Path, code: int) -> None:
    path = script(tmp_path, JITTED + f"print('first')\nraise SystemExit({code})\n")
    with subprocess.Popen([MEMSCOPE, "run", str(path)], env=PROGRAM_ENV, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True) as child:
        assert child.stdout is not None and child.stderr is not None
        assert child.stdout.readline() == "first\n"
        child.stdout.close()  # as `| head -1` does
        error = child.stderr.read()
        assert child.wait(timeout=300) == code, error
    assert "Traceback" not in error and "BrokenPipe" not in error


def test_stop_after_under_a_target_that_catches_base_exception(tmp_path: Path) -> None:
    path = script(tmp_path, JITTED + """\
        try:
            for _ in range(5):
                step(jnp.ones(4))
        except BaseException as e:
            print("caught", type(e).__name__)
    """)
    report = tmp_path / "r.json"
    done = subprocess.run([MEMSCOPE, "run", "-q", "-o", str(report), "--stop-after", "2",
                           str(path)], env=PROGRAM_ENV, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    saved = load_report(str(report))
    assert (saved.run.outcome, saved.run.exit_code) == ("stopped", 0)
    assert [fn.calls for fn in saved.functions] == [2]


def test_calls_of_a_non_daemon_thread_after_the_script_ends_are_counted(
        tmp_path: Path) -> None:
    path = script(tmp_path, JITTED + """\
        import threading, time
        def later():
            time.sleep(0.5)
            for _ in range(3):
                step(jnp.ones(4))
            print("thread done")
        threading.Thread(target=later).start()
        print("main done")
    """)
    report = tmp_path / "r.json"
    plain, measured = both(path, report=report)
    assert plain.stdout == "main done\nthread done\n"
    assert (measured.returncode, measured.stdout) == (0, plain.stdout)
    assert [fn.calls for fn in load_report(str(report)).functions] == [1 + 3]


def test_a_relative_output_is_where_memscope_started_not_where_the_target_went(
        tmp_path: Path) -> None:
    (tmp_path / "elsewhere").mkdir()
    path = script(tmp_path, JITTED + "import os\nos.chdir('elsewhere')\n")
    done = subprocess.run([MEMSCOPE, "run", "-q", "-o", "r.json", "--html", "r.html",
                           str(path)], cwd=tmp_path, env=PROGRAM_ENV, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert load_report(str(tmp_path / "r.json")).functions
    assert (tmp_path / "r.html").read_text().startswith("<!DOCTYPE html>")
    assert not list((tmp_path / "elsewhere").iterdir())


@pytest.mark.parametrize("options", [("-o", "{script}"), ("--html", "{script}"),
                                     ("-o", "same.json", "--html", "same.json")])
def test_outputs_that_would_destroy_a_file_are_refused_before_the_run(
        tmp_path: Path, options: tuple[str, ...]) -> None:
    marker = tmp_path / "ran"
    path = script(tmp_path, f"open({str(marker)!r}, 'w').close()\n" + JITTED)
    source = path.read_text()
    filled = [o.format(script=path) for o in options]
    done = subprocess.run([MEMSCOPE, "run", *filled, str(path)], cwd=tmp_path, env=PROGRAM_ENV,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 2
    assert done.stderr.startswith("memscope: error: ") and len(done.stderr.splitlines()) == 1
    assert path.read_text() == source and not marker.exists()


@pytest.mark.skipif(os.geteuid() == 0, reason="root may write a read-only file")
def test_an_unwritable_existing_output_is_refused_before_the_run(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    path = script(tmp_path, f"open({str(marker)!r}, 'w').close()\n" + JITTED)
    out = tmp_path / "r.json"
    out.write_text("{}")
    out.chmod(0o444)
    done = subprocess.run([MEMSCOPE, "run", "-o", str(out), str(path)], env=PROGRAM_ENV,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 2 and "not writable" in done.stderr
    assert not marker.exists()


def test_os_exit_writes_nothing_and_leaves_an_existing_report_whole(tmp_path: Path) -> None:
    path = script(tmp_path, JITTED + "import os\nprint('out', flush=True)\nos._exit(4)\n")
    report = tmp_path / "r.json"
    report.write_text("previous\n")
    plain, measured = both(path, report=report)
    assert (measured.returncode, measured.stdout) == (plain.returncode, plain.stdout)
    assert plain.returncode == 4
    assert report.read_text() == "previous\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.json", "target.py"]


def test_memscope_frames_are_not_in_the_user_s_tracebacks(tmp_path: Path) -> None:
    path = script(tmp_path, JITTED + """\
        import traceback
        bad = jax.jit(lambda x, y: x @ y)
        try:
            bad(jnp.ones((2, 3)), jnp.ones((2, 3)))
        except TypeError as e:
            print([frame.filename for frame in traceback.extract_tb(e.__traceback__)])
    """)
    plain, measured = both(path)
    assert plain.returncode == 0, plain.stderr
    assert (measured.returncode, measured.stdout) == (0, plain.stdout)


class _Terminal:
    """A file that says it is a terminal, as a console checks."""

    def isatty(self) -> bool:
        return True

    def write(self, text: str) -> int:
        return len(text)

    def flush(self) -> None:
        pass


@pytest.mark.parametrize(("value", "coloured"), [("", True), ("1", False), (None, True)])
def test_only_a_non_empty_no_color_turns_colour_off(monkeypatch: pytest.MonkeyPatch,
                                                    value: str | None, coloured: bool) -> None:
    from memscope.render.console import make_console

    if value is None:
        monkeypatch.delenv("NO_COLOR", raising=False)
    else:
        monkeypatch.setenv("NO_COLOR", value)
    console = make_console(_Terminal(), width=80)  # type: ignore[arg-type]
    assert (console.color_system is not None) == coloured


def test_an_uncaught_error_prints_python_s_own_traceback(tmp_path: Path) -> None:
    path = script(tmp_path, JITTED + """\
        def f(x):
            return x @ x
        g = jax.jit(f)
        g(jnp.ones((2, 3)))
    """)
    plain, measured = both(path)
    assert plain.returncode == 1 and "Traceback" in plain.stderr
    assert (measured.returncode, measured.stderr) == (plain.returncode, plain.stderr)


def test_a_sigterm_the_process_was_started_ignoring_stays_ignored(tmp_path: Path) -> None:
    path = script(tmp_path, JITTED + """\
        import os, signal
        os.kill(os.getpid(), signal.SIGTERM)
        print("still here")
    """)
    ignoring = [sys.executable, "-c", "import os, signal, sys; "
                "signal.signal(signal.SIGTERM, signal.SIG_IGN); os.execv(sys.argv[1], sys.argv[1:])"]
    plain = subprocess.run([*ignoring, sys.executable, str(path)], env=PROGRAM_ENV,
                           capture_output=True, text=True, timeout=120)
    measured = subprocess.run([*ignoring, MEMSCOPE, "run", "-q", str(path)], env=PROGRAM_ENV,
                              capture_output=True, text=True, timeout=300)
    assert (plain.returncode, plain.stdout) == (0, "still here\n")
    assert (measured.returncode, measured.stdout) == (0, plain.stdout)
