"""``memscope run``: run a script like python and report its jitted functions."""

from __future__ import annotations

import os
import sys

import click

from memscope.analysis import run_and_report
from memscope.errors import EXIT_USAGE, MemscopeError
from memscope.render.terminal import render_report
from memscope.report import save_report
from memscope.runner import Target, check_target


@click.command(context_settings={"allow_interspersed_args": False})
@click.option("-m", "--module", "as_module", is_flag=True,
              help="Run TARGET as a module, like python -m.")
@click.option("-o", "--output", metavar="FILE.json",
              help="Also save the report as JSON (written however the run ends).")
@click.option("-q", "--quiet", is_flag=True, help="Do not print the report.")
@click.argument("target", metavar="SCRIPT")
@click.argument("args", nargs=-1, type=click.UNPROCESSED)
@click.pass_context
def run(ctx: click.Context, as_module: bool, output: str | None, quiet: bool,
        target: str, args: tuple[str, ...]) -> None:
    """Run SCRIPT [ARGS]... (or -m MODULE [ARGS]...) as python would, then report
    every jitted function it called: memory figures and the fate of each buffer.

    Everything after SCRIPT goes to the script untouched, options included.
    The exit code is the script's own (1 if it raised, 130 if interrupted).
    """
    what = Target(target, tuple(args), module=as_module)
    check_target(what)
    if output is not None:
        _check_writable(output)
    report = run_and_report(what)
    assert report.run is not None
    if output is not None:
        save_report(report, output)
    if not quiet:
        render_report(report, sys.stdout)
    if not report.functions:
        outcome = report.run.outcome
        ended = "" if outcome == "completed" else f" before it {outcome}"
        click.echo(f"memscope: {target} called no jitted function{ended}; "
                   "nothing to report", err=True)
        ctx.exit(report.run.exit_code or EXIT_USAGE)
    ctx.exit(report.run.exit_code)


def _check_writable(path: str) -> None:
    # Checked before the run, so a long training run is not lost to a typo.
    folder = os.path.dirname(os.path.abspath(path))
    if not path:
        raise MemscopeError("cannot write the report: the --output path is empty")
    if os.path.isdir(path):
        raise MemscopeError(f"cannot write the report to {path}: it is a folder")
    if not os.path.isdir(folder):
        raise MemscopeError(f"cannot write the report to {path}: no folder {folder}")
    if not os.access(folder, os.W_OK):
        raise MemscopeError(f"cannot write the report to {path}: {folder} is not writable")
