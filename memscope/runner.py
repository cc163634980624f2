"""Run a script or module as ``__main__``, the way ``python`` does.

``sys.argv`` is ``[SCRIPT, *ARGS]``, ``sys.path[0]`` is the script's folder (the
working directory for ``-m``), and the target's stdout is left alone. However
the target ends (returning, ``sys.exit(n)``, an uncaught exception, Ctrl-C, or
memscope's own :class:`~memscope.errors.TargetStopped` for ``--stop-after``), the
caller gets a :class:`RunResult` back instead of an exception, so what was
captured can still be reported.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import runpy
import sys
import traceback
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from memscope.errors import EXIT_INTERRUPTED, EXIT_TARGET_RAISED, TargetError, TargetStopped
from memscope.report import Outcome

_PYTHON_SUFFIXES = (".py", ".pyw")


@dataclass(frozen=True)
class Target:
    """What to run: a script path, or a module name when ``module`` is true."""

    name: str
    args: tuple[str, ...] = ()
    module: bool = False


@dataclass(frozen=True)
class RunResult:
    outcome: Outcome
    exit_code: int
    #: the uncaught exception as one line (``ValueError: bad shape``), if any
    error: str | None = None


def check_target(target: Target) -> None:
    """Fail early, with one line, for a target ``python`` could not start.

    Raises:
        TargetError: missing file, a folder without ``__main__.py``, a file that
            is not Python source, a syntax error, or an unknown module.
    """
    if target.module:
        _check_module(target.name)
        return
    path = target.name
    if os.path.isdir(path):
        if not os.path.isfile(os.path.join(path, "__main__.py")):
            raise TargetError(f"{path} is a folder with no __main__.py; give a Python script")
        return
    if not os.path.exists(path):
        raise TargetError(f"cannot run {path}: no such file")
    try:
        with open(path, "rb") as f:
            source = f.read()
    except OSError as e:
        raise TargetError(f"cannot read {path}: {e.strerror}") from None
    try:
        compile(source, path, "exec", dont_inherit=True)
    except (SyntaxError, ValueError) as e:
        if not path.endswith(_PYTHON_SUFFIXES) or b"\0" in source:
            raise TargetError(f"{path} is not a Python script") from None
        where = f"{path}:{e.lineno}" if isinstance(e, SyntaxError) and e.lineno else path
        message = e.msg if isinstance(e, SyntaxError) else str(e)
        raise TargetError(f"{where}: syntax error: {message}") from None


def _check_module(name: str) -> None:
    try:
        with _main_sys_path(Target(name, module=True)):
            spec = importlib.util.find_spec(name)
    except (ImportError, ValueError) as e:
        raise TargetError(f"cannot run module {name!r}: {e}") from None
    if spec is None:
        raise TargetError(f"cannot run module {name!r}: no module named {name!r}")


def run_target(target: Target, *, on_finish: Callable[[], None] | None = None) -> RunResult:
    """Run ``target`` as ``__main__`` and say how it ended; never raises for it.

    ``on_finish`` is called once the target's code has ended, while what it
    left behind still exists: the namespace a script ends with (``python``
    keeps it until exit), or the frames of the exception that ended it.
    """
    with _as_main(target):
        try:
            if target.module:
                namespace = runpy.run_module(target.name, run_name="__main__",
                                             alter_sys=True)
            else:
                namespace = runpy.run_path(target.name, run_name="__main__")
        except BaseException as e:
            result = _ended_by(e)
            if on_finish is not None:
                on_finish()  # ``e`` still holds the target's frames
            return result
        finally:
            sys.stdout.flush()
        if on_finish is not None:
            on_finish()
        del namespace
    return RunResult("completed", 0)


def _ended_by(e: BaseException) -> RunResult:
    if isinstance(e, SystemExit):
        return _exit_result(e.code)
    if isinstance(e, TargetStopped):
        return RunResult("stopped", 0)
    _print_traceback(e)
    if isinstance(e, KeyboardInterrupt):
        return RunResult("interrupted", EXIT_INTERRUPTED, "KeyboardInterrupt")
    return RunResult("failed", EXIT_TARGET_RAISED, _one_line(e))


def _exit_result(code: object) -> RunResult:
    # The same rules as the interpreter's for SystemExit.
    if code is None:
        return RunResult("completed", 0)
    if isinstance(code, int):  # bools included, as python treats them
        return RunResult("completed" if code == 0 else "failed", code)
    print(code, file=sys.stderr)
    return RunResult("failed", 1, f"SystemExit: {code}")


def _one_line(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return f"{type(e).__name__}: {text[0]}" if text else type(e).__name__


def _print_traceback(e: BaseException) -> None:
    # Drop the frames of memscope and runpy above the target's own, as python
    # shows none of its own machinery either.
    tb = e.__traceback__
    here = os.path.dirname(os.path.abspath(__file__))
    while tb is not None and (tb.tb_frame.f_code.co_filename.startswith(here)
                              or tb.tb_frame.f_code.co_filename == runpy.__file__
                              or "<frozen runpy>" in tb.tb_frame.f_code.co_filename):
        tb = tb.tb_next
    sys.stdout.flush()
    traceback.print_exception(type(e), e, tb, file=sys.stderr)


@contextlib.contextmanager
def _main_sys_path(target: Target) -> Iterator[None]:
    """``sys.path[0]`` as python sets it: the script's folder, or the working
    directory for ``-m``."""
    saved = sys.path[:]
    if target.module:
        folder = os.getcwd()
    else:
        folder = os.path.abspath(target.name)
        if not os.path.isdir(folder):
            folder = os.path.dirname(folder)
    sys.path[0:1] = [folder]
    try:
        yield
    finally:
        sys.path[:] = saved


@contextlib.contextmanager
def _as_main(target: Target) -> Iterator[None]:
    saved_argv = sys.argv
    sys.argv = [target.name, *target.args]  # for -m, runpy sets argv[0] to the file
    try:
        with _main_sys_path(target):
            yield
    finally:
        sys.argv = saved_argv
