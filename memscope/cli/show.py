"""``memscope show``: render a saved report again."""

from __future__ import annotations

import sys

import click

from memscope.render.terminal import render_report
from memscope.report import load_report


@click.command()
@click.argument("report_file", metavar="REPORT.json")
def show(report_file: str) -> None:
    """Render a report saved with `memscope run -o REPORT.json`."""
    render_report(load_report(report_file), sys.stdout)
