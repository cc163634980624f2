"""A capture that begins when the program imports JAX, not before.

``memscope run`` runs the program as python would, and python imports JAX only
when the program does: after the lines that configure it through the
environment (``os.environ["JAX_ENABLE_X64"] = "1"`` before ``import jax``).
:func:`capture_on_import` therefore imports no JAX itself; it asks
:mod:`memscope.program.imports` to set :func:`~memscope.capturing.capture` up
inside the program's own ``import jax``, once JAX's code has run, on the JAX the
program configured. A program that never imports JAX is run without memscope
having imported JAX either.

This module imports no JAX (only the capture, when JAX arrives, does).
"""

from __future__ import annotations

import contextlib
import types
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from memscope.errors import MemscopeError, described
from memscope.program.imports import when_imported

if TYPE_CHECKING:
    from memscope.capturing.session import Session


class DeferredCapture:
    """The capture of one run, once the program has imported JAX.

    ``session`` is ``None`` until then (and for good, if it never does);
    ``problem`` says why no capture began although it did (a JAX memscope
    cannot capture on), in one line.
    """

    def __init__(self, options: dict[str, Any],
                 started: Callable[[Session], None] | None = None) -> None:
        self._options = options
        self._started = started
        self._stack = contextlib.ExitStack()
        self.session: Session | None = None
        self.problem: str | None = None

    def begin(self, module: types.ModuleType | None = None) -> None:
        """Set the capture up now (JAX has been imported); never raises: the
        program's ``import jax`` must succeed as under python."""
        if self.session is not None or self.problem is not None:
            return
        try:
            from memscope.capturing.recorder import capture

            self.session = self._stack.enter_context(capture(**self._options))
            if self._started is not None:
                self._started(self.session)
        except MemscopeError as e:  # said once the program has ended
            self.problem = f"{e}; the program ran unmeasured"
        except Exception as e:  # memscope's own fault: the program runs unmeasured
            self.problem = (f"memscope could not set up its capture when the program "
                            f"imported JAX ({described(e)}); the program ran "
                            "unmeasured")

    def finish(self) -> None:
        """The program's code has ended (what it left behind still exists)."""
        if self.session is not None:
            self.session.finish()

    def explain(self, error: BaseException) -> None:
        """The exception that ended the program, while its frames are at hand."""
        if self.session is not None:
            self.session.ledger.explain(error)

    def close(self) -> None:
        """End the capture: its reads and variants finish first."""
        self._stack.close()


@contextlib.contextmanager
def capture_on_import(started: Callable[[Session], None] | None = None,
                      **options: Any) -> Iterator[DeferredCapture]:
    """Within the block, :func:`~memscope.capturing.capture` (with ``options``)
    from the moment the program imports JAX (at once if it has already), then
    ``started(session)``; the capture ends with the block."""
    pending = DeferredCapture(options, started)
    try:
        with when_imported("jax", pending.begin):
            yield pending
    finally:
        pending.close()
