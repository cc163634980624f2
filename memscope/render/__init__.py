"""Renderers: each takes a Report (or part of one) and a file, and computes nothing."""

from __future__ import annotations

#: How each check status reads in a table (the reasons follow it).
STATUS_LABELS = {
    "pass": "pass", "fail": "FAIL", "not_called": "FAIL",
    "new": "new", "vanished": "vanished", "unchecked": "unchecked",
}
