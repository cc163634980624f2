"""What long work reports as it goes, for the faces to show (no rendering here)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class Step:
    """Where long work stands: what is being done, in the user's terms, and how
    far it has come (``total`` ``None`` where unknown)."""

    what: str
    done: int
    total: int | None = None


#: Takes each :class:`Step` as the work reaches it (from any thread).
Reporter = Callable[[Step], None]


def SILENT(step: Step) -> None:
    """The reporter that shows nothing."""
