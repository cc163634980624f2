"""Reports as files: load and save, a file written whole or not at all."""

from __future__ import annotations

import contextlib
import os

from memscope.errors import ReportFormatError
from memscope.report.run import Report


def load_report(path: str) -> Report:
    """Read a report saved as JSON.

    Raises:
        ReportFormatError: the file cannot be read, is not JSON, or is not a report.
    """
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except (OSError, UnicodeDecodeError) as e:
        reason = e.strerror if isinstance(e, OSError) else "not UTF-8 text"
        raise ReportFormatError(f"cannot read {path}: {reason}") from None
    try:
        return Report.from_json(text)
    except ReportFormatError as e:
        raise ReportFormatError(f"{path}: {e}") from None


def save_report(report: Report, path: str) -> None:
    """Write ``report`` as JSON to ``path``, whole or not at all (see :func:`write_whole`).

    Raises:
        ReportFormatError: the file cannot be written.
    """
    write_whole(path, report.to_json() + "\n")


def write_whole(path: str, text: str) -> None:
    """Write ``text`` to ``path`` through a file beside it, renamed into place, so
    that a process ended mid-write (``os._exit``, SIGKILL) leaves the old file
    as it was, never half of the new one.

    Raises:
        ReportFormatError: the file cannot be written.
    """
    partial = f"{path}.{os.getpid()}.partial"
    try:
        with open(partial, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(partial, path)
    except OSError as e:
        with contextlib.suppress(OSError):
            os.remove(partial)
        raise ReportFormatError(f"cannot write {path}: {e.strerror}") from None
