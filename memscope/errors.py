"""memscope's one error type. Library code raises it; the CLI turns it into one line.

Exit codes (documented in docs/cli.md):

* the program's own exit code passes through ``memscope run``;
* 1: the program raised an uncaught exception;
* 2 (:data:`EXIT_USAGE`): a usage error (click's own too: an unknown option
  or subcommand, a missing argument, a bad option value), or memscope could not
  do what was asked: a missing or unreadable program,
  a syntax error, an unknown module, a corrupt report, a program that called
  no jitted function, a malformed config or size, a JAX older than the
  supported series (before 0.7), or one without a private attribute capturing
  reads (nothing is run; a newer series runs, its figures unverified);
* 4 (:data:`EXIT_UNREADABLE`): ``memscope run --strict`` and ``memscope check``
  could not read the compiled program of a function (the program itself
  succeeded);
* 5 (:data:`EXIT_FIX_REFUSED`): ``memscope fix`` refused an edit (a donated
  argument read after the call, a jit built dynamically, a file changed since
  the capture, ...); nothing was written;
* 6 (:data:`EXIT_FIX_UNVERIFIED`): ``memscope fix --write`` measured the edited
  program and it differs from the advice; the files were restored (unless
  ``--keep``);
* 130 (:data:`EXIT_INTERRUPTED`): the run was interrupted (Ctrl-C);
* 143 (:data:`EXIT_TERMINATED`): SIGTERM ended the run (the report of what was
  captured is written, and the process then dies of the signal, as under python).

``memscope fix`` exits 3 when the program fails under it; ``memscope fit`` 1
(:data:`EXIT_NOTHING_FITS`) when not even the smallest batch fits the budget.

``memscope check`` has its own: 0 pass, 1 a regression, a broken budget, or
nothing compared with a baseline that has functions (:data:`EXIT_REGRESSION`),
2 as above, 3 the program itself failed
(:data:`EXIT_PROGRAM_FAILED`).
"""

from __future__ import annotations

EXIT_PROGRAM_RAISED = 1
EXIT_REGRESSION = 1
EXIT_USAGE = 2
EXIT_PROGRAM_FAILED = 3
EXIT_UNREADABLE = 4
EXIT_FIX_REFUSED = 5
EXIT_FIX_UNVERIFIED = 6
EXIT_INTERRUPTED = 130
#: The exit status a shell shows for a process that SIGTERM ended (128 + 15).
EXIT_TERMINATED = 128 + 15
EXIT_NOTHING_FITS = 1


class MemscopeError(Exception):
    """A failure memscope reports as one line; ``exit_code`` is what the CLI returns."""

    exit_code: int = EXIT_USAGE

    def __init__(self, message: str, *, exit_code: int | None = None) -> None:
        super().__init__(message)
        if exit_code is not None:
            self.exit_code = exit_code


def text_of(value: object) -> str:
    """``str(value)``, or ``<TypeName>`` where its ``__str__`` raises (python then
    prints nothing useful either)."""
    try:
        return str(value)
    except Exception:
        return f"<{type(value).__name__}>"


def first_line(what: str | BaseException, limit: int | None = None) -> str:
    """The first line of what ``what`` says (an error's message, or a text); an
    error that says nothing gives its type's name. Cut to ``limit`` characters,
    ending in ``...``, where given."""
    lines = text_of(what).strip().splitlines()
    line = lines[0] if lines else (type(what).__name__ if isinstance(what, BaseException)
                                   else "")
    if limit is not None and len(line) > limit:
        line = line[:limit - 3] + "..."
    return line


def described(error: BaseException, *, whole: bool = True) -> str:
    """``TypeName: message``, how memscope records an exception: the whole
    message, or (``whole=False``) its first line; the type's name alone where
    the error says nothing."""
    text = text_of(error).strip()
    if not whole and text:
        text = text.splitlines()[0]
    return f"{type(error).__name__}: {text}" if text else type(error).__name__


class ProgramError(MemscopeError):
    """The program (the script or module to run) cannot be started."""


class ReportFormatError(MemscopeError):
    """A file given as a memscope report is not one."""


class ProgramStopped(BaseException):
    """Raised inside the program to end it once ``--stop-after N`` jitted calls ran.

    A ``BaseException`` like ``KeyboardInterrupt``, so that the program's own
    ``except Exception`` handlers let it through.
    """

    def __init__(self, calls: int) -> None:
        super().__init__(f"stopped after {calls} jitted calls")
        self.calls = calls
