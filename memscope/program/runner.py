"""Run a script or module as ``__main__``, the way ``python`` does.

``sys.argv`` is ``[SCRIPT, *ARGS]``, ``sys.path[0]`` is the script's folder (the
working directory for ``-m``), and the program's stdout is left alone. However
the program ends (returning, ``sys.exit(n)``, an uncaught exception, Ctrl-C, or
memscope's own :class:`~memscope.errors.ProgramStopped` for ``--stop-after``), the
caller gets a :class:`RunResult` back instead of an exception, so what was
captured can still be reported.
"""

from __future__ import annotations

import builtins
import contextlib
import importlib.machinery
import importlib.util
import os
import runpy
import sys
import threading
import traceback
import types
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from memscope.errors import (
    EXIT_INTERRUPTED,
    EXIT_PROGRAM_RAISED,
    ProgramError,
    ProgramStopped,
    described,
    text_of,
)
from memscope.program import sites
from memscope.report import Outcome

_PYTHON_SUFFIXES = (".py", ".pyw")


@dataclass(frozen=True)
class Script:
    """The user's program to run: a script path, or a module name when ``module``
    is true.

    ``packages`` names more packages as the user's code (``--user-package``),
    beside the program's own (see :func:`user_code`)."""

    name: str
    args: tuple[str, ...] = ()
    module: bool = False
    packages: tuple[str, ...] = ()


@dataclass(frozen=True)
class RunResult:
    outcome: Outcome
    exit_code: int
    #: the uncaught exception as one line (``ValueError: bad shape``), if any
    error: str | None = None


def check_script(script: Script) -> None:
    """Fail early, with one line, for a program ``python`` could not start.

    Raises:
        ProgramError: missing file, a folder without ``__main__.py``, a file that
            is not Python source, a syntax error, an unknown module, or an
            unknown ``--user-package``.
    """
    if script.module:
        _check_module(script.name)
        user_code(script)
        return
    user_code(script)
    path = script.name
    if os.path.isdir(path):
        if not os.path.isfile(os.path.join(path, "__main__.py")):
            raise ProgramError(f"{path} is a folder with no __main__.py; give a Python script")
        return
    if not os.path.exists(path):
        raise ProgramError(f"cannot run {path}: no such file")
    try:
        with open(path, "rb") as f:
            source = f.read()
    except OSError as e:
        raise ProgramError(f"cannot read {path}: {e.strerror}") from None
    try:
        compile(source, path, "exec", dont_inherit=True)
    except (SyntaxError, ValueError) as e:
        if not path.endswith(_PYTHON_SUFFIXES) or b"\0" in source:
            raise ProgramError(f"{path} is not a Python script") from None
        where = f"{path}:{e.lineno}" if isinstance(e, SyntaxError) and e.lineno else path
        message = e.msg if isinstance(e, SyntaxError) else str(e)
        raise ProgramError(f"{where}: syntax error: {message}") from None


def user_code(script: Script) -> sites.UserCode:
    """The files that are the user's code in ``script``'s run, wherever they are
    installed: a script's own folder; for ``-m``, the top-level package (or
    module) the program runs from; and each package of ``script.packages``.
    Found through the import system's finders, importing nothing.

    Raises:
        ProgramError: a package of ``script.packages`` that cannot be found.
    """
    roots: list[str] = []
    if script.module:
        top = script.name.split(".")[0]  # the whole package the module is in
        roots.extend(_package_roots(top, Script(script.name, module=True)))
    else:
        folder = os.path.abspath(script.name)
        roots.append(os.path.realpath(folder if os.path.isdir(folder)
                                      else os.path.dirname(folder)) + os.sep)
    for name in script.packages:
        found = _package_roots(name, script)
        if not found:
            raise ProgramError(f"--user-package {name}: no package or module {name!r} "
                              "is installed where the program would import it from")
        roots.extend(found)
    return sites.UserCode(roots=tuple(dict.fromkeys(roots)), packages=script.packages)


def _package_roots(name: str, script: Script) -> list[str]:
    """Where the package (``maxtext``) or module named ``name`` lives, as the
    program's ``sys.path`` finds it: its folders, or its file; a dotted name
    (``maxtext.trainers``) names the folder of that subpackage."""
    top, *rest = name.split(".")
    with _main_sys_path(script):
        try:
            spec = importlib.machinery.PathFinder.find_spec(top, sys.path)
        except (ImportError, ValueError):
            spec = None
    if spec is None:
        return []
    folders = list(spec.submodule_search_locations or ())
    if not folders:  # a single-file module: the file is the user's
        return [os.path.realpath(spec.origin)] if spec.origin else []
    return [os.path.realpath(os.path.join(folder, *rest)) + os.sep for folder in folders]


def _check_module(name: str) -> None:
    try:
        with _main_sys_path(Script(name, module=True)):
            _main_spec(name)
    except (ImportError, ValueError) as e:
        raise ProgramError(f"cannot run module {name!r}: {e}") from None


def run_script(script: Script, *, on_finish: Callable[[], None] | None = None,
               on_error: Callable[[BaseException], None] | None = None) -> RunResult:
    """Run ``script`` as ``__main__`` and say how it ended; never raises for it.

    ``on_finish`` is called once the program's code has ended and its
    non-daemon threads have too (python waits for them before it exits), while
    what it left behind still exists: the ``__main__`` namespace a script ends
    with, or the frames of the exception that ended it. ``on_error`` is given
    the exception that ended the program, while its frames are at hand.
    """
    with _as_main(script), sites.as_program_code(user_code(script)):
        try:
            try:
                _run(script)
            finally:
                _flush(sys.stdout)
        except BaseException as e:
            if on_error is not None:
                with contextlib.suppress(Exception):
                    on_error(e)
            result = _ended_by(e)
        else:
            result = RunResult("completed", 0)
        result = _wait_for_threads(result)
        if on_finish is not None:
            on_finish()
    return result


def _run(script: Script) -> None:
    """Execute the program's code in a fresh ``__main__`` module set up as python 3.11
    does: ``__file__`` absolute, ``__loader__``, ``__spec__`` (``None`` for a script),
    ``__cached__``, and the module itself in ``sys.modules["__main__"]``."""
    if script.module:
        spec = _main_spec(script.name)
        assert spec.loader is not None and spec.origin is not None
        code = spec.loader.get_code(spec.name)  # type: ignore[attr-defined]
        sys.argv[0] = spec.origin
        module = _fresh_main(__file__=spec.origin, __cached__=spec.cached,
                             __loader__=spec.loader, __package__=spec.parent,
                             __spec__=spec)
    elif os.path.isdir(script.name):
        # A folder runs its __main__.py through the import system, as python does.
        runpy.run_path(script.name, run_name="__main__")
        return
    else:
        path = os.path.abspath(script.name)
        with open(path, "rb") as f:
            code = compile(f.read(), path, "exec", dont_inherit=True)
        module = _fresh_main(__file__=path, __cached__=None,
                             __loader__=importlib.machinery.SourceFileLoader("__main__", path),
                             __package__=None, __spec__=None)
    sys.modules["__main__"] = module
    exec(code, module.__dict__)


# The program's stack ends at _run: its callers are memscope's launcher.
sites.stop_at(_run.__code__)


def _fresh_main(**attributes: Any) -> types.ModuleType:
    module = types.ModuleType("__main__")
    module.__dict__.update(attributes, __builtins__=builtins)
    return module


def _main_spec(name: str) -> importlib.machinery.ModuleSpec:
    """The spec of what ``python -m name`` runs: the module, or a package's ``__main__``."""
    spec = importlib.util.find_spec(name)
    if spec is not None and spec.submodule_search_locations is not None:
        spec = importlib.util.find_spec(f"{name}.__main__")
    if spec is None or spec.loader is None or spec.origin is None:
        raise ImportError(f"No module named {name!r} to run")
    return spec


def _wait_for_threads(result: RunResult) -> RunResult:
    """Wait for the program's non-daemon threads, as python does before it exits,
    so the calls they make after the main script ended are counted too.

    Idle ``concurrent.futures`` workers are left alone: python ends those through
    an exit hook of its own, which must not run while memscope still works.
    """
    current = threading.current_thread()
    while True:
        waiting = [t for t in threading.enumerate()
                   if t is not current and t.is_alive() and not t.daemon
                   and not t.name.startswith(("memscope", "ThreadPoolExecutor"))]
        if not waiting:
            return result
        try:
            for thread in waiting:
                thread.join()
        except KeyboardInterrupt as e:
            return _ended_by(e)


def _flush(stream: Any) -> None:
    # The program may have closed or replaced sys.stdout; that is its business.
    with contextlib.suppress(Exception):
        stream.flush()


def _ended_by(e: BaseException) -> RunResult:
    """How ``e`` ended the program, after printing it as python would."""
    if isinstance(e, SystemExit):
        if e.code is not None and not isinstance(e.code, int):
            with contextlib.suppress(Exception):
                print(e.code, file=sys.stderr)
    elif not isinstance(e, ProgramStopped):
        _print_traceback(e)
    return ended_by(e)


def ended_by(e: BaseException) -> RunResult:
    """How the exception ``e`` that ended a program ends its run, with the exit code
    python would give it (``sys.exit(n)``, an uncaught exception, Ctrl-C) or
    ``stopped`` for :class:`~memscope.errors.ProgramStopped`; prints nothing."""
    if isinstance(e, SystemExit):
        return _exit_result(e.code)
    if isinstance(e, ProgramStopped):
        return RunResult("stopped", 0)
    if isinstance(e, KeyboardInterrupt):
        return RunResult("interrupted", EXIT_INTERRUPTED, "KeyboardInterrupt")
    return RunResult("failed", EXIT_PROGRAM_RAISED, described(e, whole=False))


def exit_status(code: int) -> int:
    """The process exit status python gives ``sys.exit(code)`` on POSIX: the C ``long``
    value (-1 when it does not fit) cut to its low 8 bits (256 -> 0, -1 -> 255)."""
    if not -2**63 <= code < 2**63:
        code = -1
    return code & 0xFF


def _exit_result(code: object) -> RunResult:
    # The same rules as the interpreter's for SystemExit.
    if code is None:
        return RunResult("completed", 0)
    if isinstance(code, int):  # bools included, as python treats them
        status = exit_status(int(code))
        return RunResult("completed" if status == 0 else "failed", status)
    return RunResult("failed", 1, f"SystemExit: {text_of(code)}")


def _print_traceback(e: BaseException) -> None:
    # Drop the frames of memscope and runpy above the program's own, as python
    # shows none of its own machinery either.
    tb = e.__traceback__
    here = sites.OWN_ROOT
    while tb is not None and (tb.tb_frame.f_code.co_filename.startswith(here)
                              or tb.tb_frame.f_code.co_filename == runpy.__file__
                              or "<frozen runpy>" in tb.tb_frame.f_code.co_filename):
        tb = tb.tb_next
    _flush(sys.stdout)
    with contextlib.suppress(Exception):  # a closed or replaced sys.stderr
        traceback.print_exception(type(e), e, tb, file=sys.stderr)


@contextlib.contextmanager
def _main_sys_path(script: Script) -> Iterator[None]:
    """``sys.path[0]`` as python sets it: the script's folder, or the working
    directory for ``-m``."""
    saved = sys.path[:]
    if script.module:
        folder = os.getcwd()
    else:
        folder = os.path.abspath(script.name)
        if not os.path.isdir(folder):
            folder = os.path.dirname(folder)
    sys.path[0:1] = [folder]
    try:
        yield
    finally:
        sys.path[:] = saved


@contextlib.contextmanager
def _as_main(script: Script) -> Iterator[None]:
    saved_argv, saved_main = sys.argv, sys.modules.get("__main__")
    sys.argv = [script.name, *script.args]  # for -m, argv[0] becomes the file
    try:
        with _main_sys_path(script):
            yield
    finally:
        sys.argv = saved_argv
        if saved_main is not None:  # in-process callers (tests) get theirs back
            sys.modules["__main__"] = saved_main
