"""``memscope run``: run a script like python and report its jitted functions."""

from __future__ import annotations

from typing import TextIO

import click

from memscope.analysis.advice import ADVICE_LEVELS, AdviceLevel
from memscope.cli._common import (
    buffers_option,
    detail_option,
    format_option,
    given_target,
    html_option,
    leaf_filter,
    leaves_options,
    misplaced_hint,
    module_option,
    nothing_called,
    output_option,
    output_paths,
    stop_after_option,
    target_option,
    trace_option,
    unmatched_path_line,
    unreadable_line,
    unverified_jax_line,
    write_html,
    write_trace,
)
from memscope.cli._pipes import PipeSafeHelp
from memscope.errors import EXIT_UNREADABLE, EXIT_USAGE
from memscope.flow import run_and_report
from memscope.options import advice_options
from memscope.program.ending import Guard
from memscope.program.runner import Script, check_script
from memscope.render.progress import terminal_progress
from memscope.report import Report, save_report
from memscope.views.leaves import LeafFilter


@click.command(cls=PipeSafeHelp, context_settings={"allow_interspersed_args": False})
@module_option
@output_option
@click.option("-q", "--quiet", is_flag=True, help="Do not print the report.")
@click.option("--advice", type=click.Choice(ADVICE_LEVELS), default=None,
              help="Which donations to compile and measure besides the program's own, "
                   "in memscope's worker thread while the program runs: 'advised' "
                   "(the default) the advisor's donation, for the advice line and its "
                   "peak; 'full' also no donation and donate all; 'off' none.")
@click.option("--no-advice", is_flag=True,
              help="The same as --advice off: only what the program itself compiled "
                   "is read.")
@click.option("--remat/--no-remat", default=None,
              help="For functions that differentiate: list what the backward pass "
                   "keeps, by source line, and compile each jax.checkpoint policy "
                   "(about one compile each) for the advice. On with --advice full "
                   "or --remat-flops, off otherwise.")
@click.option("--remat-flops", type=click.FloatRange(min=0), default=None,
              metavar="FRACTION",
              help="With --remat: advise the policy with the largest measured peak "
                   "saving whose FLOPs grow by at most FRACTION (default 0.35: about "
                   "one more forward pass).")
@stop_after_option
@click.option("--strict", is_flag=True,
              help="Exit 4 when the compiled program of a function could not be read "
                   "(and the script itself succeeded).")
@detail_option
@format_option
@buffers_option
@html_option
@trace_option
@target_option
@leaves_options
@click.argument("program", metavar="SCRIPT")
@click.argument("args", nargs=-1, type=click.UNPROCESSED)
@click.pass_context
def run(ctx: click.Context, as_module: bool, user_packages: tuple[str, ...], output: str | None, quiet: bool,
        advice: AdviceLevel | None, no_advice: bool, remat: bool | None,
        remat_flops: float | None, stop_after: int | None, strict: bool,
        detail: bool, output_format: str, buffers: bool, html: str | None, trace: str | None, target_spec: str | None,
        leaves: bool, path_pattern: str | None,
        fate: str | None,
        program: str, args: tuple[str, ...]) -> None:
    """Run SCRIPT [ARGS]... (or -m MODULE [ARGS]...) as python would, then report
    every jitted function it called: memory figures, the fate of each buffer, and
    what other donations would change (each compiled and measured).

    The output answers first (per function: peak, what is wrong, what to change
    and the peak it was measured to save), then the figures, then a section for
    each function with something to change, one line per argument; --detail
    shows every function in full, --leaves every leaf.

    Everything after SCRIPT goes to the script untouched, options included.
    The exit code is the script's own (1 if it raised, 130 if interrupted, 0 if
    --stop-after ended it); with --strict, 4 if the script succeeded but a
    compiled program could not be read.
    """
    level, remat_at = advice_options(advice, no_advice, remat, remat_flops)
    what = Script(program, tuple(args), module=as_module,
                     packages=user_packages)
    check_script(what)
    paths = output_paths(what, output=output, html=html, trace=trace)
    guard = ctx.with_resource(Guard())
    which = leaf_filter(leaves, path_pattern, fate)
    chips = given_target(target_spec)

    progress = ctx.with_resource(terminal_progress(quiet))

    def deliver(report: Report) -> None:
        progress.end()  # the compiles' line goes before the report is written
        if paths["output"] is not None:
            save_report(report, paths["output"])
        if paths["html"] is not None:
            write_html(report, paths["html"])
        if paths["trace"] is not None:
            write_trace(report, paths["trace"])
        if not quiet:
            guard.write(lambda out: _render(report, out, buffers, which, detail,
                                            output_format))

    warning = unverified_jax_line()
    if warning is not None:
        click.echo(warning, err=True)
    report = run_and_report(what, advise=level, stop_after=stop_after, guard=guard,
                            deliver=deliver,
                            remat_flops=remat_at,
                            target=chips, progress=progress)
    assert report.run is not None
    if not report.functions:
        hint = misplaced_hint(ctx, args, "memscope run -o report.json train.py --lr 3e-4")
        click.echo(nothing_called(program, report.run.outcome, hint), err=True)
        ctx.exit(report.run.exit_code or EXIT_USAGE)
    unmatched = unmatched_path_line(report, which)
    if unmatched is not None:
        click.echo(unmatched, err=True)
    unreadable = unreadable_line(report)
    if unreadable is not None:
        click.echo(unreadable, err=True)
        if strict and report.run.exit_code == 0:
            ctx.exit(EXIT_UNREADABLE)
    ctx.exit(report.run.exit_code)


def _render(report: Report, out: TextIO, buffers: bool, which: LeafFilter | None,
            detail: bool, output_format: str) -> None:
    # Imported here, once the program has ended: rich and the renderers cost
    # about 80 ms at start, which a run with -q (or the pytest plugin) never needs.
    from memscope.render.buffers import render_buffers
    from memscope.render.markdown_run import render_run_markdown
    from memscope.render.terminal import render_report

    if output_format == "markdown":
        render_run_markdown(report, out)
        return
    render_report(report, out, leaves=which, detail=detail)
    if buffers:
        render_buffers(report, out)
