"""``memscope show``: render a saved report again."""

from __future__ import annotations

import click

from memscope.cli._common import (
    buffers_option,
    check_writable,
    detail_option,
    format_option,
    html_option,
    leaf_filter,
    leaves_options,
    trace_option,
    unmatched_path_line,
    write_html,
    write_trace,
)
from memscope.cli._pipes import PipeSafeHelp, printing
from memscope.render.buffers import render_buffers
from memscope.render.markdown_run import render_run_markdown
from memscope.render.terminal import render_report
from memscope.report import load_report


@click.command(cls=PipeSafeHelp)
@detail_option
@format_option
@buffers_option
@html_option
@trace_option
@leaves_options
@click.argument("report_file", metavar="REPORT.json")
def show(detail: bool, output_format: str, buffers: bool, html: str | None,
         trace: str | None, leaves: bool, path_pattern: str | None, fate: str | None,
         report_file: str) -> None:
    """Render a report saved with `memscope run -o REPORT.json`."""
    if html is not None:
        check_writable(html, "--html")
    if trace is not None:
        check_writable(trace, "--trace")
    which = leaf_filter(leaves, path_pattern, fate)
    report = load_report(report_file)
    if html is not None:
        write_html(report, html)
    if trace is not None:
        write_trace(report, trace)
    with printing() as out:
        if output_format == "markdown":
            render_run_markdown(report, out)
        else:
            render_report(report, out, leaves=which, detail=detail)
            if buffers:
                render_buffers(report, out)
    unmatched = unmatched_path_line(report, which)
    if unmatched is not None:
        click.echo(unmatched, err=True)
