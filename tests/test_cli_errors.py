"""The CLI's errors: one line ``memscope: error: ...`` on stderr, exit code 2, no traceback."""

from __future__ import annotations

import os
from pathlib import Path

import click
import pytest

from memscope.cli import COMMANDS, cli
from tests.support.cli import assert_one_line_error, cli_error, invoke, run_installed, write


@pytest.fixture
def valid_script(tmp_path: Path) -> tuple[Path, Path]:
    """A script that only leaves a marker file; returns (script, marker)."""
    marker = tmp_path / "marker"
    script = write(tmp_path / "valid.py", f"""\
        with open({str(marker)!r}, "w") as f:
            f.write("ran")
    """)
    return script, marker


# --- memscope run: targets that cannot start ---------------------------------------


def test_run_missing_script(tmp_path: Path) -> None:
    path = str(tmp_path / "missing.py")
    message = cli_error("run", path)
    assert message == f"cannot run {path}: no such file"


def test_run_folder_without_main(tmp_path: Path) -> None:
    folder = tmp_path / "project"
    folder.mkdir()
    message = cli_error("run", str(folder))
    assert str(folder) in message and "__main__.py" in message


def test_run_binary_file(tmp_path: Path) -> None:
    path = tmp_path / "data.bin"
    path.write_bytes(b"\x7fELF\x00\x00\x01\x02\xff\xfe\x00")
    assert cli_error("run", str(path)) == f"{path} is not a Python script"


def test_run_syntax_error_names_file_and_line(tmp_path: Path) -> None:
    path = write(tmp_path / "broken.py", "import sys\n\nprint(sys.argv\nx = = 1\n")
    message = cli_error("run", str(path))
    assert message.startswith(f"{path}:")
    assert "syntax error" in message
    assert f"{path}:{_python_syntax_error_line(path)}:" in message


def _python_syntax_error_line(path: Path) -> int:
    try:
        compile(path.read_bytes(), str(path), "exec")
    except SyntaxError as e:
        assert e.lineno is not None
        return e.lineno
    raise AssertionError("expected a syntax error")


def test_run_syntax_error_reports_its_line_number(tmp_path: Path) -> None:
    path = write(tmp_path / "broken.py", "a = 1\nb = 2\nc = 3\ndef f(:\n    pass\n")
    assert cli_error("run", str(path)).startswith(f"{path}:4: syntax error")


def test_run_unknown_module() -> None:
    message = cli_error("run", "-m", "no_such_module_xyz")
    assert "no_such_module_xyz" in message


def test_run_output_in_missing_folder_fails_before_running(
        tmp_path: Path, valid_script: tuple[Path, Path]) -> None:
    script, marker = valid_script
    message = cli_error("run", "-o", "/nonexistent_dir/r.json", str(script))
    assert "/nonexistent_dir/r.json" in message
    assert not marker.exists()


def test_run_output_that_is_a_folder_fails_before_running(
        tmp_path: Path, valid_script: tuple[Path, Path]) -> None:
    script, marker = valid_script
    message = cli_error("run", "-o", str(tmp_path), str(script))
    assert "folder" in message
    assert not marker.exists()


# --- click's own usage errors: one line, exit 2, for the group and every subcommand ---


@pytest.mark.parametrize(("args", "line"), [
    (("bogus",), "no such command 'bogus' (see 'memscope --help')"),
    (("--bogus",), "no such option '--bogus' (see 'memscope --help')"),
    (("run",), "missing argument 'SCRIPT' (see 'memscope run --help')"),
    (("run", "--advice", "bogus", "x.py"),
     "invalid value for '--advice': 'bogus' is not one of 'off', 'advised', 'full' "
     "(see 'memscope run --help')"),
    (("run", "--stop-after", "0", "x.py"),
     "invalid value for '--stop-after': 0 is not in the range x>=1 "
     "(see 'memscope run --help')"),
    (("run", "--no-advice", "--advice", "full", "x.py"),
     "--no-advice and --advice full contradict each other; give one of them"),
    (("fit", "--memory"), "option '--memory' requires an argument (see 'memscope fit --help')"),
    (("check", "--max-increase"),
     "option '--max-increase' requires an argument (see 'memscope check --help')"),
    (("diff",), "missing argument 'SCRIPT|OLD.json' (see 'memscope diff --help')"),
    (("merge",), "missing argument 'REPORT.json...' (see 'memscope merge --help')"),
    (("show", "a.json", "b.json"),
     "got unexpected extra argument (b.json) (see 'memscope show --help')"),
    (("fix", "--function"), "option '--function' requires an argument "
                            "(see 'memscope fix --help')"),
])
def test_click_usage_errors_are_one_line(args: tuple[str, ...], line: str) -> None:
    result = invoke(*args)
    assert (result.exit_code, result.stdout, result.stderr) == (2, "", f"memscope: error: {line}\n")


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_every_subcommand_says_an_unknown_option_in_one_line(name: str) -> None:
    message = cli_error(name, "--no-such-option", "x")
    assert message.startswith("no such option '--no-such-option'"), message
    assert message.endswith(f" (see 'memscope {name} --help')")


def test_a_value_that_is_not_printable_is_escaped_in_the_line() -> None:
    message = cli_error("show", "--format", "\x1b[31m\nx", "r.json")
    assert message.startswith("invalid value for '--format': '\\x1b[31m\\nx' is not one of")


def test_a_usage_error_runs_nothing(valid_script: tuple[Path, Path]) -> None:
    script, marker = valid_script
    cli_error("run", "--no-advice", "--advice", "full", str(script))
    cli_error("run", "--advice", "bogus", str(script))
    assert not marker.exists()


def test_bad_options_after_the_script_are_the_scripts(tmp_path: Path) -> None:
    path = write(tmp_path / "argv.py", "import sys\nprint('ARGV', sys.argv[1:])\n")
    result = invoke("run", "-q", str(path), "--advice", "bogus", "--no-such", "-o")
    assert "ARGV ['--advice', 'bogus', '--no-such', '-o']" in result.stdout
    assert "memscope: error" not in result.stderr
    assert result.exit_code == 2  # the script ran and called no jitted function


def test_bare_memscope_still_prints_its_help() -> None:
    # click 8.2 and later: the help on stderr, exit 2 (8.1: stdout, exit 0)
    result = invoke()
    assert result.output.startswith("Usage: memscope [OPTIONS] COMMAND [ARGS]...\n")
    assert "Commands:" in result.output and "memscope: error" not in result.output


def test_version_is_unchanged() -> None:
    from memscope.version import __version__

    result = invoke("--version")
    assert (result.exit_code, result.stdout, result.stderr) == (
        0, f"memscope, version {__version__}\n", "")


# --- memscope show: files that are not reports ------------------------------------


def test_show_missing_report(tmp_path: Path) -> None:
    path = str(tmp_path / "missing.json")
    message = cli_error("show", path)
    assert message.startswith(f"cannot read {path}")


def test_show_invalid_json(tmp_path: Path) -> None:
    path = write(tmp_path / "bad.json", "{not json")
    message = cli_error("show", str(path))
    assert message.startswith(f"{path}: not valid JSON")


def test_show_foreign_json(tmp_path: Path) -> None:
    path = write(tmp_path / "other.json", '{"hello": 1}')
    message = cli_error("show", str(path))
    assert message.startswith(f"{path}: not a memscope report")


def test_show_json_that_is_not_an_object(tmp_path: Path) -> None:
    path = write(tmp_path / "list.json", "[1, 2, 3]")
    assert "not a memscope report" in cli_error("show", str(path))


def test_show_other_schema(tmp_path: Path) -> None:
    path = write(tmp_path / "future.json", '{"schema": "memscope.report/99"}')
    assert "memscope.report/99" in cli_error("show", str(path))


@pytest.mark.parametrize("command", [
    ("check", "--baseline", "{fit}", "--report", "{fit}"),
    ("check", "--baseline", "{bad}", "--report", "{fit}"),
    ("check", "--baseline", "{missing}", "--report", "{fit}"),
    ("diff", "{fit}", "{fit}"),
    ("diff", "{bad}", "{fit}"),
    ("merge", "-o", "{out}", "{fit}", "{fit}")])
def test_another_memscope_json_or_a_broken_one_is_one_line(
        tmp_path: Path, command: tuple[str, ...]) -> None:
    """A ``memscope fit --format json`` output where a report belongs (or a broken
    or missing file) is one line naming the file, for every command reading reports."""
    files = {"fit": str(write(tmp_path / "fit.json", '{"schema": "memscope.fit/1"}')),
             "bad": str(write(tmp_path / "bad.json", "{not json")),
             "missing": str(tmp_path / "missing.json"), "out": str(tmp_path / "out.json")}
    message = cli_error(*(arg.format(**files) for arg in command))
    first = next(files[k] for k in ("bad", "missing", "fit") if f"{{{k}}}" in command)
    assert message.startswith((f"{first}: ", f"no baseline at {first}")), message
    assert not os.path.exists(files["out"])


def test_show_report_missing_fields_names_the_field(tmp_path: Path) -> None:
    path = write(tmp_path / "partial.json", '{"schema": "memscope.report/1"}')
    message = cli_error("show", str(path))
    assert "missing field 'memscope_version'" in message


def test_show_report_field_of_wrong_type_names_the_field(tmp_path: Path) -> None:
    path = write(tmp_path / "typed.json", """\
        {"schema": "memscope.report/1", "memscope_version": 7,
         "environment": {}, "run": null, "functions": []}
    """)
    message = cli_error("show", str(path))
    assert "memscope_version" in message and "expected str" in message


def test_show_non_utf8_file(tmp_path: Path) -> None:
    path = tmp_path / "latin.json"
    path.write_bytes(b'{"schema": "\xe9"}')
    assert "not UTF-8" in cli_error("show", str(path))


# --- memscope run: targets that start but call no jitted function ------------------


def test_run_script_without_jit_exits_2_and_says_so(tmp_path: Path) -> None:
    path = write(tmp_path / "plain.py", "print('just python')\n")
    result = invoke("run", "-q", str(path))
    assert result.exit_code == 2
    assert "just python" in result.stdout
    assert "called no jitted function" in result.stderr
    assert "Traceback" not in result.output
    assert len(result.stderr.splitlines()) == 1


def test_run_script_without_jit_keeps_its_own_exit_code(tmp_path: Path) -> None:
    path = write(tmp_path / "exits.py", "import sys\nsys.exit(4)\n")
    result = invoke("run", "-q", str(path))
    assert result.exit_code == 4
    assert "called no jitted function" in result.stderr
    assert "Traceback" not in result.output


def test_run_script_that_raises_exits_1_with_its_traceback_only(tmp_path: Path) -> None:
    path = write(tmp_path / "raises.py", "raise ValueError('bad shape')\n")
    result = invoke("run", "-q", str(path))
    assert result.exit_code == 1
    assert result.stderr.startswith("Traceback")
    assert "ValueError: bad shape" in result.stderr
    assert "memscope/program/runner.py" not in result.stderr
    assert "click" not in result.stderr


# --- help ----------------------------------------------------------------------------


SUBCOMMANDS = sorted(COMMANDS)


def test_every_subcommand_has_help_text() -> None:
    assert SUBCOMMANDS == ["bisect", "check", "diff", "fit", "fix", "install-compiler", "merge",
                           "run", "show"]
    for name in SUBCOMMANDS:
        command = cli.get_command(click.Context(cli), name)
        assert command is not None and command.help and command.help.strip(), name


@pytest.mark.parametrize("name", SUBCOMMANDS)
def test_subcommand_help_exits_zero(name: str) -> None:
    result = invoke(name, "--help")
    assert result.exit_code == 0, result.output
    assert result.stdout.startswith(f"Usage: memscope {name}")
    assert result.stderr == ""


def test_group_help_lists_every_subcommand() -> None:
    result = invoke("--help")
    assert result.exit_code == 0
    for name in SUBCOMMANDS:
        assert f"  {name} " in result.stdout


def test_help_after_the_script_goes_to_the_script(tmp_path: Path) -> None:
    path = write(tmp_path / "argv.py", "import sys\nprint('ARGV', sys.argv[1:])\n")
    result = invoke("run", "-q", str(path), "--help", "-o", "x.json")
    assert "ARGV ['--help', '-o', 'x.json']" in result.stdout
    assert "Usage:" not in result.output
    assert "Run SCRIPT" not in result.output
    assert not (tmp_path / "x.json").exists()
    assert result.exit_code == 2  # the script ran and called no jitted function


# --- the installed console script --------------------------------------------------


def test_installed_run_missing_script(tmp_path: Path) -> None:
    proc = run_installed("run", "missing.py", cwd=tmp_path)
    message = assert_one_line_error(proc.returncode, proc.stdout, proc.stderr)
    assert message == "cannot run missing.py: no such file"
    assert proc.stdout == ""


def test_installed_show_invalid_json(tmp_path: Path) -> None:
    write(tmp_path / "bad.json", "{not json")
    proc = run_installed("show", "bad.json", cwd=tmp_path)
    message = assert_one_line_error(proc.returncode, proc.stdout, proc.stderr)
    assert message.startswith("bad.json: not valid JSON")


def test_installed_run_output_in_missing_folder(tmp_path: Path,
                                                valid_script: tuple[Path, Path]) -> None:
    script, marker = valid_script
    proc = run_installed("run", "-o", "/nonexistent_dir/r.json", script.name, cwd=tmp_path)
    assert_one_line_error(proc.returncode, proc.stdout, proc.stderr)
    assert not marker.exists()


def test_installed_run_script_without_jit_keeps_exit_code(tmp_path: Path) -> None:
    write(tmp_path / "exits.py", "import sys\nsys.exit(4)\n")
    proc = run_installed("run", "-q", "exits.py", cwd=tmp_path)
    assert proc.returncode == 4
    assert "called no jitted function" in proc.stderr
    assert "Traceback" not in proc.stdout + proc.stderr


def test_installed_help_after_the_script_goes_to_the_script(tmp_path: Path) -> None:
    write(tmp_path / "argv.py", "import sys\nprint('ARGV', sys.argv)\n")
    proc = run_installed("run", "-q", "argv.py", "--help", cwd=tmp_path)
    assert "ARGV ['argv.py', '--help']" in proc.stdout
    assert "Usage:" not in proc.stdout + proc.stderr
    assert proc.returncode == 2


def test_installed_usage_error_is_one_line(tmp_path: Path) -> None:
    proc = run_installed("run", "--advice", "bogus", "x.py", cwd=tmp_path)
    message = assert_one_line_error(proc.returncode, proc.stdout, proc.stderr)
    assert message == ("invalid value for '--advice': 'bogus' is not one of 'off', 'advised', "
                       "'full' (see 'memscope run --help')")
    assert proc.stdout == ""


def test_installed_run_module_in_working_directory(tmp_path: Path) -> None:
    write(tmp_path / "ms_cli_cwd_mod.py", "print('module ran')\n")
    proc = run_installed("run", "-q", "-m", "ms_cli_cwd_mod", cwd=tmp_path)
    assert "module ran" in proc.stdout, proc.stderr
    assert "memscope: error" not in proc.stderr


def test_run_empty_output_path_fails_before_running(valid_script: tuple[Path, Path]) -> None:
    script, marker = valid_script
    result = invoke("run", "-q", "-o", "", str(script))
    assert result.exit_code == 2
    assert not marker.exists()
