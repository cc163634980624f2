"""Long work's progress on the terminal: one live line on stderr.

What is being done, how far it has come and for how long, redrawn in place
while memscope works and gone when it ends (``transient``): the report that
follows is what stays. Shown only on a terminal: piped, redirected or with
``-q`` nothing at all is written, and nothing before the first
:class:`~memscope.progress.Step`, so the program's own output (memscope's
steps come once it has ended, or from memscope's own work) is never drawn
over.
"""

from __future__ import annotations

import contextlib
import sys
import threading
import time
from collections.abc import Iterator
from typing import IO, Any

from memscope.progress import Step


def progress_text(step: Step, seconds: float) -> str:
    """``compiling train_step as written for tpu:v5e:2x2 (1 of 2 done, 12 s)``."""
    done = (f"{step.done} of {step.total} done" if step.total is not None
            else f"{step.done} done")
    return f"{step.what} ({done}, {seconds:.0f} s)"


@contextlib.contextmanager
def terminal_progress(quiet: bool = False, stream: IO[str] | None = None
                      ) -> Iterator[Shown]:
    """A :data:`~memscope.progress.Reporter` (called with each step, from any
    thread) that shows the steps on ``stream`` (stderr by default) while the
    block runs, where it is a terminal and not ``quiet``; elsewhere one that
    shows nothing. :meth:`Shown.end` takes the line away before the block ends
    (before a report is printed)."""
    out = sys.stderr if stream is None else stream
    shown = Shown(None if quiet or not _is_terminal(out) else out)
    try:
        yield shown
    finally:
        shown.end()


class Shown:
    """The live line, started at the first step (so that nothing is drawn while
    the program may still write), elapsed time counted from it; with no
    stream, nothing."""

    def __init__(self, out: IO[str] | None) -> None:
        self._out = out
        self._lock = threading.Lock()
        self._live: Any = None  # rich's Live, made at the first step
        self._spinner: Any = None
        self._text: Any = None
        self._started = 0.0

    def __call__(self, step: Step) -> None:
        with self._lock:
            if self._out is None:
                return
            if self._live is None:
                # rich is imported here: a run that shows nothing never pays for it
                from rich.console import Console
                from rich.live import Live
                from rich.spinner import Spinner
                from rich.text import Text

                self._started = time.monotonic()
                self._spinner = Spinner("dots", style="cyan")
                self._text = Text  # plain text: a function's name is not markup
                console = Console(file=self._out, highlight=False)
                # The program's streams are left as they are (no redirection).
                self._live = Live(self._spinner, console=console, transient=True,
                                  refresh_per_second=8, redirect_stdout=False,
                                  redirect_stderr=False)
                self._live.start()
            self._spinner.update(text=self._text(
                "memscope: " + progress_text(step, time.monotonic() - self._started)))

    def end(self) -> None:
        """Take the line away (no more steps are shown)."""
        with self._lock:
            self._out = None
            if self._live is not None:
                self._live.stop()
                self._live = None


def _is_terminal(stream: IO[str]) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):  # no isatty, or closed
        return False
