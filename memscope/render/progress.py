"""Long work's progress on the terminal: one live line on stderr.

What is being done, how far it has come and for how long, redrawn in place
while memscope works and gone when it ends (``transient``): the answer that
follows is what stays. Shown only on a terminal: piped, redirected or with
``-q`` nothing at all is written (or, where a command asks for it, one plain
line per step: ``bisect``'s, read in CI logs). Nothing is drawn before the
first :class:`~memscope.progress.ProgressStep`, so output written before the work
(the program's own) is never drawn over.

The API: :func:`terminal_progress` (a context manager) yields a :class:`Shown`,
the :data:`~memscope.progress.Reporter` to hand to the stages;
:meth:`Shown.end` takes the line away before the block ends.
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
import time
from collections.abc import Iterator
from typing import IO, Any

from memscope.progress import ProgressStep


def progress_text(step: ProgressStep, seconds: float | None = None) -> str:
    """``step`` in one line: ``compiling step as written at batch 64 for this
    machine (1 of 2 done, 12 s)`` (:func:`count_text` in brackets, where it says
    anything)."""
    count = count_text(step, seconds)
    return f"{step.what} ({count})" if count else step.what


def count_text(step: ProgressStep, seconds: float | None = None) -> str:
    """How far ``step`` has come: ``1 of 2 done, 12 s``; the seconds where given,
    the count where there is one (none for a step with no total and nothing
    done); ``""`` where neither."""
    said = []
    if step.total is not None:
        said.append(f"{step.done} of {'about ' if step.about else ''}{step.total} done")
    elif step.done:
        said.append(f"{step.done} done")
    if seconds is not None:
        said.append(f"{seconds:.0f} s")
    return ", ".join(said)


@contextlib.contextmanager
def terminal_progress(quiet: bool = False, stream: IO[str] | None = None, *,
                      lines: str | None = None) -> Iterator[Shown]:
    """A :data:`~memscope.progress.Reporter` for the block: called with each
    step (from any thread), it shows the latest on ``stream`` (stderr by
    default) as one live line, with a spinner and the seconds since the first
    step, where ``stream`` is a terminal and not ``quiet``. Elsewhere it shows
    nothing, or, given ``lines`` (a prefix: ``"memscope bisect"``) and not
    ``quiet``, writes each step as a plain line ``prefix: text``. The live line
    is gone when the block ends, however it ends."""
    own = _own_stderr() if stream is None and not quiet else None
    out = own or (sys.stderr if stream is None else stream)
    if quiet:
        shown = Shown(None)
    elif _is_terminal(out):
        shown = Shown(out)
    else:
        shown = Shown(out if lines is not None else None, lines=lines)
    try:
        yield shown
    finally:
        shown.end()
        if own is not None:
            own.close()


def _own_stderr() -> IO[str] | None:
    """stderr as it is now, on a file descriptor of its own: the line stays on
    the terminal while memscope holds descriptor 2 apart (``fit`` keeps XLA's
    log lines off it: :func:`memscope.compiled.targets.base.compiler_logs_dropped`).
    ``None`` where stderr has no descriptor (a test's captured stream)."""
    try:
        sys.stderr.flush()
        return os.fdopen(os.dup(sys.stderr.fileno()), "w", buffering=1,
                         encoding=getattr(sys.stderr, "encoding", None) or "utf-8",
                         errors="replace")
    except (AttributeError, OSError, ValueError):  # io.UnsupportedOperation is an OSError
        return None


class Shown:
    """The reporter :func:`terminal_progress` yields: the live line on ``out``
    (started at the first step, elapsed time counted from it), or, with
    ``lines``, a plain line per step on ``out``; with no ``out``, nothing."""

    def __init__(self, out: IO[str] | None, *, lines: str | None = None) -> None:
        self._out = out
        self._lines = lines
        self._lock = threading.Lock()
        self._live: Any = None  # rich's Live, made at the first step
        self._spinner: Any = None
        self._step: ProgressStep | None = None
        self._started = 0.0

    def __call__(self, step: ProgressStep) -> None:
        with self._lock:
            if self._out is None:
                return
            if self._lines is not None:
                print(f"{self._lines}: {progress_text(step)}", file=self._out, flush=True)
                return
            self._step = step
            if self._live is None:
                self._start(self._out)
            else:
                self._live.refresh()  # the new step now, not at the next tick

    def end(self) -> None:
        """Take the line away; later steps show nothing."""
        with self._lock:
            self._out = None
            if self._live is not None:
                self._live.stop()
                self._live = None

    def _start(self, out: IO[str]) -> None:
        # rich is imported here: a command that shows nothing never pays for it
        from rich.console import Console
        from rich.live import Live
        from rich.spinner import Spinner

        self._started = time.monotonic()
        self._spinner = Spinner("dots", style="cyan")
        console = Console(file=out, force_terminal=True, highlight=False, markup=False,
                          emoji=False, force_jupyter=False)
        # The streams are left as they are: stdout is the answer, not the line's.
        self._live = Live(console=console, get_renderable=self._line, transient=True,
                          refresh_per_second=4, redirect_stdout=False, redirect_stderr=False)
        self._live.start(refresh=True)

    def _line(self) -> Any:
        """What the live line shows now (rich calls it at each refresh, from its
        own thread)."""
        step = self._step
        now = time.monotonic()
        return _LiveLine(self._spinner.render(now), "" if step is None else step.what,
                         "" if step is None else count_text(step, now - self._started))


class _LiveLine:
    """One row: the spinner, what is being done, and how far it has come; what
    is being done cut with an ellipsis where the terminal is too narrow for the
    whole, so that the count stays. The last column is left empty: a terminal
    that wraps on writing there would leave the line on two rows."""

    def __init__(self, frame: Any, what: str, count: str) -> None:
        self.frame, self.what, self.count = frame, what, count

    def __rich_console__(self, console: Any, options: Any) -> Iterator[Any]:
        from rich.text import Text

        width = options.max_width
        what = Text(self.what)
        what.truncate(max(width - len(self.count) - 4, 1), overflow="ellipsis")
        line = Text.assemble(self.frame, " ", what, " ", (self.count, "dim"))
        line.truncate(width - 1, overflow="ellipsis")
        yield line


def _is_terminal(stream: IO[str]) -> bool:
    """A terminal that moves its cursor (not ``TERM=dumb``)."""
    try:
        if not stream.isatty():
            return False
    except (AttributeError, ValueError):  # no isatty, or closed
        return False
    return os.environ.get("TERM") not in ("dumb", "unknown")
