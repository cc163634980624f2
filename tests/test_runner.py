"""memscope.program.runner in-process: a target runs as ``python SCRIPT ARGS`` would run it."""

from __future__ import annotations

import gc
import importlib
import json
import os
import sys
import textwrap
from pathlib import Path

import pytest

from memscope.errors import EXIT_USAGE, ProgramError
from memscope.program.runner import RunResult, Script, check_script, run_script


def write_script(folder: Path, body: str, name: str = "script.py") -> Path:
    path = folder / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(body), encoding="utf-8")
    return path


def record(folder: Path, expression: str) -> str:
    """Script source that writes ``json.dumps(expression)`` to ``folder/seen.json``."""
    out = str(folder / "seen.json")
    return (f"import json, os, sys\nwith open({out!r}, 'w') as _f:\n"
            f"    _f.write(json.dumps({expression}))\n")


def seen(folder: Path) -> object:
    return json.loads((folder / "seen.json").read_text())


def check_fails(target: Script) -> str:
    with pytest.raises(ProgramError) as info:
        check_script(target)
    message = str(info.value)
    assert info.value.exit_code == EXIT_USAGE == 2
    assert message and "\n" not in message
    return message


# --- how the target sees the world -------------------------------------------------


def test_argv_is_script_then_args_with_options_untouched(tmp_path: Path) -> None:
    script = write_script(tmp_path, record(tmp_path, "sys.argv"))
    args = ("--steps", "2", "-v", "--", "-m", "x y")
    result = run_script(Script(str(script), args))
    assert result == RunResult("completed", 0)
    assert seen(tmp_path) == [str(script), *args]


def test_argv_zero_is_the_script_path_as_given(tmp_path: Path, monkeypatch: pytest.MonkeyPatch
                                               ) -> None:
    monkeypatch.chdir(tmp_path)
    write_script(tmp_path / "sub", record(tmp_path, "sys.argv"))
    run_script(Script(os.path.join("sub", "script.py"), ("a",)))
    assert seen(tmp_path) == [os.path.join("sub", "script.py"), "a"]


def test_path_zero_is_the_script_folder_made_absolute(tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    write_script(tmp_path / "sub", record(tmp_path, "sys.path[0]"))
    run_script(Script(os.path.join("sub", "script.py")))
    path0 = seen(tmp_path)
    assert isinstance(path0, str)
    assert os.path.isabs(path0)
    assert os.path.samefile(path0, tmp_path / "sub")


def test_script_can_import_a_module_beside_it(tmp_path: Path) -> None:
    write_script(tmp_path, "VALUE = 41\n", name="ms_helper_beside.py")
    script = write_script(tmp_path, "import ms_helper_beside\n"
                          + record(tmp_path, "ms_helper_beside.VALUE + 1"))
    importlib.invalidate_caches()
    try:
        assert run_script(Script(str(script))) == RunResult("completed", 0)
    finally:
        sys.modules.pop("ms_helper_beside", None)
    assert seen(tmp_path) == 42


def test_module_target_has_cwd_as_path_zero(tmp_path: Path,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    write_script(tmp_path, record(tmp_path, "[sys.path[0], __name__, sys.argv[1:]]"),
                 name="ms_runner_cwd_mod.py")
    importlib.invalidate_caches()
    result = run_script(Script("ms_runner_cwd_mod", ("--flag", "1"), module=True))
    assert result == RunResult("completed", 0)
    path0, name, args = seen(tmp_path)  # type: ignore[misc]
    assert path0 == os.getcwd()
    assert name == "__main__"
    assert args == ["--flag", "1"]


def test_module_target_argv_zero_is_the_module_file(tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    # As with ``python -m``: runpy puts the module's file in sys.argv[0].
    monkeypatch.chdir(tmp_path)
    module = write_script(tmp_path, record(tmp_path, "sys.argv"), name="ms_runner_argv_mod.py")
    importlib.invalidate_caches()
    run_script(Script("ms_runner_argv_mod", ("-v",), module=True))
    argv0, *rest = seen(tmp_path)  # type: ignore[misc]
    assert os.path.samefile(argv0, module)
    assert rest == ["-v"]


def test_target_runs_as_main(tmp_path: Path) -> None:
    script = write_script(tmp_path, record(tmp_path, "__name__"))
    run_script(Script(str(script)))
    assert seen(tmp_path) == "__main__"


def test_main_guard_body_runs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    script = write_script(tmp_path, """\
        if __name__ == "__main__":
            print("guarded body ran")
    """)
    run_script(Script(str(script)))
    assert capsys.readouterr().out == "guarded body ran\n"


def test_target_stdout_is_untouched(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    script = write_script(tmp_path, """\
        import sys
        print("first line")
        print("  indented, with trailing space ")
        sys.stdout.write("no newline at end")
    """)
    result = run_script(Script(str(script)))
    out, err = capsys.readouterr()
    assert result == RunResult("completed", 0)
    assert out == "first line\n  indented, with trailing space \nno newline at end"
    assert err == ""


# --- how the target ends -----------------------------------------------------------


def test_returning_normally_is_completed_zero(tmp_path: Path) -> None:
    script = write_script(tmp_path, "x = 1\n")
    assert run_script(Script(str(script))) == RunResult("completed", 0, None)


def test_sys_exit_zero_is_completed_zero(tmp_path: Path) -> None:
    script = write_script(tmp_path, "import sys\nsys.exit(0)\n")
    assert run_script(Script(str(script))) == RunResult("completed", 0, None)


def test_sys_exit_none_is_completed_zero(tmp_path: Path) -> None:
    script = write_script(tmp_path, "import sys\nsys.exit()\n")
    assert run_script(Script(str(script))) == RunResult("completed", 0, None)


def test_sys_exit_nonzero_is_failed_with_that_code(tmp_path: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    script = write_script(tmp_path, "import sys\nsys.exit(3)\n")
    result = run_script(Script(str(script)))
    assert result.outcome == "failed"
    assert result.exit_code == 3
    assert capsys.readouterr().err == ""


def test_sys_exit_message_is_printed_to_stderr_with_code_one(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    script = write_script(tmp_path, "import sys\nsys.exit('message')\n")
    result = run_script(Script(str(script)))
    out, err = capsys.readouterr()
    assert result.outcome == "failed"
    assert result.exit_code == 1
    assert err == "message\n"
    assert out == ""


def test_sys_exit_false_is_completed_zero_like_python(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    script = write_script(tmp_path, "import sys\nsys.exit(False)\n")
    result = run_script(Script(str(script)))
    assert result == RunResult("completed", 0)
    assert capsys.readouterr().err == ""


def test_uncaught_exception_is_failed_with_one_line_error(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    script = write_script(tmp_path, """\
        def reshape():
            raise ValueError("bad shape")

        reshape()
    """)
    result = run_script(Script(str(script)))
    assert result == RunResult("failed", 1, "ValueError: bad shape")
    err = capsys.readouterr().err
    assert err.startswith("Traceback (most recent call last):")
    assert err.rstrip().endswith("ValueError: bad shape")
    assert str(script) in err
    assert "reshape()" in err


def test_uncaught_exception_traceback_hides_memscope_and_runpy(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    script = write_script(tmp_path, "raise ValueError('bad shape')\n")
    run_script(Script(str(script)))
    err = capsys.readouterr().err
    frames = [line for line in err.splitlines() if line.lstrip().startswith('File "')]
    assert frames, err
    assert all(str(script) in line for line in frames), err
    assert os.path.join("memscope", "runner.py") not in err
    assert "runpy" not in err


def test_exception_message_over_several_lines_gives_its_first_line(tmp_path: Path,
                                                                   capsys: pytest.CaptureFixture[str]
                                                                   ) -> None:
    script = write_script(tmp_path, "raise RuntimeError('first\\nsecond')\n")
    result = run_script(Script(str(script)))
    capsys.readouterr()
    assert result.error == "RuntimeError: first"


def test_keyboard_interrupt_is_interrupted_130(tmp_path: Path,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    script = write_script(tmp_path, "raise KeyboardInterrupt\n")
    result = run_script(Script(str(script)))
    assert result.outcome == "interrupted"
    assert result.exit_code == 130
    assert "KeyboardInterrupt" in capsys.readouterr().err


def test_the_program_runs_with_the_garbage_collector_as_python_leaves_it(tmp_path: Path
                                                                         ) -> None:
    # memscope run pauses the collector while it imports its subcommand (and JAX):
    # the program's own code must find it on, with the thresholds it had.
    from click.testing import CliRunner

    from memscope.cli import cli

    before = gc.isenabled(), gc.get_threshold()
    assert before[0]
    script = write_script(tmp_path, "import gc, jax\njax.jit(lambda x: x + 1)(1.0)\n" + record(
        tmp_path, "[gc.isenabled(), list(gc.get_threshold())]"))
    result = CliRunner().invoke(cli, ["run", "-q", "-o", str(tmp_path / "r.json"), str(script)],
                                catch_exceptions=False)
    assert result.exit_code == 0, result.output
    assert seen(tmp_path) == [True, list(before[1])]
    assert (gc.isenabled(), gc.get_threshold()) == before


def test_argv_and_path_restored_after_a_run(tmp_path: Path) -> None:
    argv, path = sys.argv[:], sys.path[:]
    script = write_script(tmp_path, "import sys\nsys.argv.append('junk')\n"
                          "sys.path.insert(0, 'junk')\n")
    run_script(Script(str(script), ("a", "b")))
    assert sys.argv == argv
    assert sys.path == path


def test_argv_and_path_restored_after_a_failing_run(tmp_path: Path,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    argv, path = sys.argv[:], sys.path[:]
    script = write_script(tmp_path, "import sys\nsys.path.append('junk')\n"
                          "raise ValueError('bad shape')\n")
    result = run_script(Script(str(script), ("--steps", "2")))
    capsys.readouterr()
    assert result.outcome == "failed"
    assert sys.argv == argv
    assert sys.path == path


def test_argv_and_path_restored_after_sys_exit_and_interrupt(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    argv, path = sys.argv[:], sys.path[:]
    for body in ("import sys\nsys.exit(5)\n", "raise KeyboardInterrupt\n"):
        run_script(Script(str(write_script(tmp_path, body)), ("x",)))
        assert sys.argv == argv
        assert sys.path == path
    monkeypatch.chdir(tmp_path)
    write_script(tmp_path, "raise ValueError('no')\n", name="ms_runner_failing_mod.py")
    importlib.invalidate_caches()
    assert run_script(Script("ms_runner_failing_mod", module=True)).outcome == "failed"
    assert sys.argv == argv
    assert sys.path == path
    capsys.readouterr()


# --- check_script ------------------------------------------------------------------


def test_check_target_accepts_a_valid_script(tmp_path: Path) -> None:
    check_script(Script(str(write_script(tmp_path, "print('hi')\n"))))


def test_check_target_does_not_run_the_script(tmp_path: Path) -> None:
    marker = tmp_path / "marker"
    script = write_script(tmp_path, f"open({str(marker)!r}, 'w').close()\n")
    check_script(Script(str(script)))
    assert not marker.exists()


def test_check_target_missing_file(tmp_path: Path) -> None:
    path = str(tmp_path / "missing.py")
    message = check_fails(Script(path))
    assert path in message
    assert "no such file" in message


def test_check_target_folder_without_main(tmp_path: Path) -> None:
    folder = tmp_path / "pkg"
    folder.mkdir()
    (folder / "other.py").write_text("x = 1\n")
    message = check_fails(Script(str(folder)))
    assert str(folder) in message
    assert "__main__.py" in message


def test_check_target_binary_file(tmp_path: Path) -> None:
    path = tmp_path / "data.bin"
    path.write_bytes(b"\x00\x01\x02\xff\xfe\x00binary\x00")
    message = check_fails(Script(str(path)))
    assert message == f"{path} is not a Python script"


def test_check_target_binary_file_named_py(tmp_path: Path) -> None:
    path = tmp_path / "weights.py"
    path.write_bytes(b"\x00\x01\x02\x00")
    assert check_fails(Script(str(path))) == f"{path} is not a Python script"


def test_check_target_text_file_that_is_not_python(tmp_path: Path) -> None:
    path = tmp_path / "notes.txt"
    path.write_text("hello world this is not python\n")
    assert check_fails(Script(str(path))) == f"{path} is not a Python script"


def test_check_target_syntax_error_names_file_and_line(tmp_path: Path) -> None:
    script = write_script(tmp_path, "x = 1\ny = 2\ndef f(:\n    pass\n", name="broken.py")
    message = check_fails(Script(str(script)))
    assert message.startswith(f"{script}:3: syntax error")


def test_check_target_unknown_module() -> None:
    message = check_fails(Script("no_such_module_xyz", module=True))
    assert "no_such_module_xyz" in message


def test_check_target_unknown_parent_package() -> None:
    message = check_fails(Script("no_such_pkg_xyz.sub", module=True))
    assert "no_such_pkg_xyz" in message


def test_folder_with_main_is_accepted_and_run(tmp_path: Path) -> None:
    folder = tmp_path / "app"
    write_script(folder, record(tmp_path, "[__name__, sys.argv[1:]]"), name="__main__.py")
    target = Script(str(folder), ("--steps", "2"))
    check_script(target)
    assert run_script(target) == RunResult("completed", 0)
    assert seen(tmp_path) == ["__main__", ["--steps", "2"]]
