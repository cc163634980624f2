"""How a run's report survives every ending python itself survives.

One :class:`Guard` per ``memscope run``/``diff``/``check`` of a program. It keeps:

* the process that started the run: a child the program forks returns through
  memscope's code too, and must end as the program's child would, without
  writing (over) the parent's report;
* the stdout memscope started with, as a stream of its own: the program may
  reassign ``sys.stdout`` (its log file must not receive the report) or close
  it (memscope must still print);
* SIGTERM: python dies of it at once, so memscope delivers what was captured so
  far and then dies of the same signal;
* SIGINT and SIGTERM while the report is built and written: they wait until it
  is written, then take effect.

``os._exit`` and SIGKILL end the process before any Python code can run, under
python as under memscope: no report is written then, and an existing one is
never left half-written (see :func:`memscope.report.save_report`).
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from typing import Any, TextIO

from memscope.errors import EXIT_INTERRUPTED


class Guard:
    """The process, stdout and signal handling of one run (see the module's docstring)."""

    def __init__(self) -> None:
        self.pid = os.getpid()
        self.stdout = own_stdout()
        self._pending: list[int] = []
        self._deferring = False

    def __enter__(self) -> Guard:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Flush memscope's stdout and close it where it is a stream of its own."""
        with contextlib.suppress(Exception):
            self.stdout.flush()
        if self.stdout is not sys.stdout and self.stdout is not sys.__stdout__:
            with contextlib.suppress(Exception):
                self.stdout.close()

    def owns_the_report(self) -> bool:
        """False in a child the program forked: only the starting process reports."""
        return os.getpid() == self.pid

    @contextlib.contextmanager
    def terminated_by(self, deliver: Callable[[], None]) -> Iterator[None]:
        """While the program runs, SIGTERM calls ``deliver`` (the report so far) and
        then ends the process by SIGTERM, as it would have ended under python.

        A handler the program installs itself replaces this one, as under python.
        """
        def on_sigterm(signum: int, frame: Any) -> None:
            if self._deferring:
                self._pending.append(signum)
                return
            if self.owns_the_report():
                self._deferring = True  # a second SIGTERM waits for this report
                with contextlib.suppress(Exception):
                    deliver()
            _die_by(signal.SIGTERM)

        with _handling({signal.SIGTERM: on_sigterm}):
            yield

    @contextlib.contextmanager
    def deferred_signals(self) -> Iterator[None]:
        """Hold SIGINT and SIGTERM while the report is built and written; then
        act on them: SIGTERM ends the process by SIGTERM, SIGINT exits 130."""
        def hold(signum: int, frame: Any) -> None:
            self._pending.append(signum)

        self._deferring = True
        try:
            with _handling({signal.SIGINT: hold, signal.SIGTERM: hold}):
                yield
        finally:
            self._deferring = False
        if signal.SIGTERM in self._pending:
            with contextlib.suppress(Exception):
                self.stdout.flush()
            _die_by(signal.SIGTERM)
        if signal.SIGINT in self._pending:
            raise SystemExit(EXIT_INTERRUPTED)

    def write(self, render: Callable[[TextIO], None]) -> None:
        """Print with ``render`` on memscope's stdout; a reader that went away
        (``memscope run ... | head -1``) is not an error of the run."""
        out = PipeSafe(self.stdout)
        render(out)  # type: ignore[arg-type]
        out.flush()


class PipeSafe:
    """A text stream that stops writing, silently, once its reader has gone.

    Python's own advice for a broken pipe: point the descriptor at devnull, so
    that the flush at exit does not fail again (turning the exit code into 120).
    """

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream
        self._broken = False

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)

    def write(self, text: str) -> int:
        if not self._broken:
            self._guarded(self._stream.write, text)
        return len(text)

    def flush(self) -> None:
        if not self._broken:
            self._guarded(self._stream.flush)

    def _guarded(self, call: Callable[..., Any], *args: Any) -> None:
        try:
            call(*args)
        except BrokenPipeError:
            self._broken = True
            devnull = os.open(os.devnull, os.O_WRONLY)
            with contextlib.suppress(Exception):
                os.dup2(devnull, self._stream.fileno())
            os.close(devnull)


def own_stdout() -> TextIO:
    """A stream on the file descriptor behind ``sys.stdout`` now, of memscope's own.

    Where ``sys.stdout`` has no file descriptor (click's test runner, a notebook),
    it is ``sys.stdout`` itself.
    """
    stream = sys.stdout
    try:
        fd = os.dup(stream.fileno())
    except (AttributeError, OSError, ValueError):
        return stream
    return open(fd, "w", encoding=stream.encoding or "utf-8",
                errors=getattr(stream, "errors", None) or "strict", closefd=True)


def _die_by(signum: int) -> None:
    """End the process by ``signum`` with its default action, as python would have."""
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    signal.signal(signum, signal.SIG_DFL)
    os.kill(os.getpid(), signum)
    raise SystemExit(128 + signum)  # only where the signal could not be delivered


@contextlib.contextmanager
def _handling(handlers: dict[int, Callable[[int, Any], None]]) -> Iterator[None]:
    """Install ``handlers`` for the block (only the main thread can). A signal the
    process was started ignoring stays ignored, as python leaves it."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    saved = {signum: signal.signal(signum, handler) for signum, handler in handlers.items()
             if signal.getsignal(signum) is not signal.SIG_IGN}
    try:
        yield
    finally:
        for signum, previous in saved.items():
            signal.signal(signum, previous)
