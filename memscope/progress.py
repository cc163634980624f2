"""What long work reports as it goes, for the faces to show (no rendering here).

A stage that works for long (``fit``'s compiles, ``bisect``'s releases, the
compiles a ``--target`` run waits for) takes a ``progress`` :data:`Reporter`
(:data:`SILENT` by default) and calls it with a :class:`ProgressStep` each time what
it does changes; it never prints. A face turns steps into what the user sees:
:func:`memscope.render.progress.terminal_progress`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class ProgressStep:
    """Where long work stands: what is being done, in the user's terms
    (``compiling train_step as written at batch 256 for gpu:h100``), and how
    far it has come: ``done`` of ``total`` (``None``: unknown; ``about``: an
    estimate, as a bisect's releases to try)."""

    what: str
    done: int
    total: int | None = None
    about: bool = False


#: Takes each :class:`ProgressStep` as the work reaches it (from any thread).
Reporter = Callable[[ProgressStep], None]


def SILENT(step: ProgressStep) -> None:
    """The reporter that shows nothing."""
