"""``memscope check``: compare a run (or a saved report) with a baseline and budgets, for CI."""

from __future__ import annotations

import os
from functools import partial
from typing import IO

import click

from memscope.check.config import load_config, with_options
from memscope.check.judge import check_report, program_failure
from memscope.check.records import CheckResult
from memscope.check.request import CheckRequest
from memscope.cli._common import (
    given_target,
    misplaced_hint,
    module_option,
    output_option,
    output_paths,
    target_option,
    unreadable_line,
    unverified_jax_line,
)
from memscope.cli._pipes import PipeSafeHelp
from memscope.errors import (
    EXIT_PROGRAM_FAILED,
    EXIT_REGRESSION,
    EXIT_UNREADABLE,
    MemscopeError,
)
from memscope.flow import run_and_report
from memscope.program.ending import Guard
from memscope.program.runner import Script, check_script
from memscope.render.check import render_check
from memscope.render.github import render_check_annotations
from memscope.render.junit import render_check_junit
from memscope.render.markdown import render_check_markdown
from memscope.render.text import visible
from memscope.report import Report, load_report, save_report


@click.command(cls=PipeSafeHelp, context_settings={"allow_interspersed_args": False})
@click.option("--baseline", metavar="FILE.json",
              help="A report saved by run -o or --update-baseline, to compare with.")
@click.option("--update-baseline", is_flag=True,
              help="Write the current report to --baseline instead of checking.")
@click.option("--report", "report_file", metavar="REPORT.json",
              help="Check this saved report instead of running a script.")
@click.option("--config", "config_file", metavar="FILE.toml",
              help="Budgets from this file instead of [tool.memscope] in pyproject.toml.")
@click.option("--max-increase", multiple=True, metavar="[FIGURE=]PCT",
              help="Allowed growth over the baseline, e.g. 5% or temp=20% "
                   "(figures: peak, temp, io). Repeatable.")
@click.option("--max-increase-bytes", multiple=True, metavar="[FIGURE=]SIZE",
              help="Allowed growth in bytes, e.g. 16MiB or peak=1GB. Repeatable.")
@click.option("--strict-env", is_flag=True,
              help="Fail when the environment differs from the baseline's.")
@click.option("--allow-empty", is_flag=True,
              help="Pass when no function of the baseline was compared (all vanished).")
@click.option("--format", "output_format", type=click.Choice(["terminal", "markdown"]),
              default="terminal", show_default=True, help="How to print the result.")
@click.option("--junit-xml", metavar="FILE.xml", help="Also write JUnit XML, a case per function.")
@click.option("--bisect", "bisect_jax", is_flag=True,
              help="Where the check fails and the baseline was taken with another JAX: "
                   "bisect the JAX releases between the two (as memscope bisect does) and "
                   "name the first release that moved each function that failed.")
@output_option
@module_option
@target_option
@click.argument("program", metavar="[SCRIPT]", required=False)
@click.argument("args", nargs=-1, type=click.UNPROCESSED)
@click.pass_context
def check(ctx: click.Context, baseline: str | None, update_baseline: bool,
          report_file: str | None, config_file: str | None, max_increase: tuple[str, ...],
          max_increase_bytes: tuple[str, ...], strict_env: bool, allow_empty: bool,
          output_format: str, junit_xml: str | None, bisect_jax: bool, output: str | None,
          as_module: bool,
          user_packages: tuple[str, ...],
          target_spec: str | None, program: str | None, args: tuple[str, ...]) -> None:
    """Run SCRIPT [ARGS]... (or check --report REPORT.json) and compare every jitted
    function with --baseline and the budgets in [tool.memscope].

    Fails when peak, temp or argument+output bytes grow beyond tolerance, a
    function gains an unusable donation, an aliased leaf loses its alias, a
    budget is broken, or no function of the baseline was compared (unless
    --allow-empty). Exit codes: 0 pass, 1 regression, 2 usage or input
    error, 3 the program itself failed, 4 a compiled program could not be read.
    """
    request = CheckRequest.make(
        program=program, args=tuple(args), as_module=as_module, report_file=report_file,
        baseline=baseline, update_baseline=update_baseline,
        config=with_options(load_config(config_file), max_increase, max_increase_bytes),
        strict_env=strict_env, allow_empty=allow_empty, output_format=output_format,
        target_spec=target_spec,
        misplaced=misplaced_hint(ctx, args, "memscope check --baseline FILE.json SCRIPT "
                                            "[ARGS]..."))
    base = (_load_baseline(request.baseline)
            if request.compares and request.baseline is not None else None)
    what = None if program is None else Script(program, tuple(args), module=as_module,
                                              packages=user_packages)
    if what is not None:
        check_script(what)
    paths = output_paths(what, output=output, junit_xml=junit_xml,
                         baseline=baseline if update_baseline else None)
    guard = ctx.with_resource(Guard())
    report = _current_report(request, what, guard, paths["output"], target_spec)
    _same_target(base, report)
    _gate(ctx, request, report)
    if update_baseline:
        _write_baseline(ctx, guard, report, request, paths["baseline"])
    result = check_report(report, base, request.config, strict_env=strict_env,
                          baseline_source=baseline, allow_empty=allow_empty)
    _deliver(result, request, guard, paths["junit_xml"])
    if bisect_jax and result.failed and base is not None:
        _bisect(result, base, report, what, target_spec, guard)
    ctx.exit(EXIT_REGRESSION if result.failed else 0)


def _bisect(result: CheckResult, base: Report, report: Report, what: Script | None,
            target_spec: str | None, guard: Guard) -> None:
    """``--bisect``: the first JAX release that moved each function that failed."""
    from memscope.bisect import baseline
    from memscope.bisect.run import run_bisect
    from memscope.render.bisect import check_lines
    from memscope.render.progress import terminal_progress

    failing = {f.name for f in result.functions if f.failed}
    asked, why = baseline.request(base, report, failing, what, target_spec)
    if asked is None:
        said = [why or ""]
    else:
        with terminal_progress(lines="memscope bisect") as progress:
            found = run_bisect(asked, progress=progress)
        said = check_lines(found, failing)
    guard.write(lambda out: print("\n".join(visible(line) for line in said), file=out))


def _current_report(request: CheckRequest, what: Script | None, guard: Guard,
                    output: str | None, target_spec: str | None) -> Report:
    """The report to judge: the saved one, or the program's run (saved to ``output``
    however it ends)."""
    if what is None:
        assert request.report_file is not None
        report = load_report(request.report_file)
        if output is not None:
            save_report(report, output)
        return report
    warning = unverified_jax_line()
    if warning is not None:
        click.echo(warning, err=True)
    return run_and_report(what, guard=guard, deliver=None if output is None
                          else partial(save_report, path=output),
                          target=given_target(target_spec))


def _gate(ctx: click.Context, request: CheckRequest, report: Report) -> None:
    """End the command where the report cannot be judged: the program failed (exit
    3), no jitted function ran (2), a compiled program was not read (4)."""
    failure = program_failure(report)
    if failure is not None:
        click.echo(visible(f"memscope: {failure}; nothing was checked{request.misplaced}"),
                   err=True)
        ctx.exit(EXIT_PROGRAM_FAILED)
    if not report.functions:
        raise MemscopeError(f"{request.program or request.report_file} called no jitted "
                            "function; nothing to check")
    unreadable = unreadable_line(report)
    if unreadable is not None:
        click.echo(f"{unreadable}; nothing was checked", err=True)
        ctx.exit(EXIT_UNREADABLE)


def _write_baseline(ctx: click.Context, guard: Guard, report: Report,
                    request: CheckRequest, path: str | None) -> None:
    """``--update-baseline``: save the report as the baseline, say so, exit 0."""
    assert request.baseline is not None and path is not None
    save_report(report, path)
    count = len(report.functions)
    line = visible(f"memscope: wrote the baseline {request.baseline} "
                   f"({count} function{'s' if count != 1 else ''})")
    guard.write(lambda out: print(line, file=out))
    ctx.exit(0)


def _deliver(result: CheckResult, request: CheckRequest, guard: Guard,
             junit_xml: str | None) -> None:
    """The result where it was asked for: printed (terminal or markdown), as JUnit
    XML, and on GitHub Actions in the step summary and as annotations."""
    if request.output_format == "markdown":
        guard.write(lambda out: render_check_markdown(result, out))
    else:
        guard.write(lambda out: render_check(result, out))
    if junit_xml is not None:
        with _open(junit_xml, "w") as f:
            render_check_junit(result, f)
    summary = os.environ.get("GITHUB_STEP_SUMMARY")
    if summary:
        with _open(summary, "a") as f:
            render_check_markdown(result, f)
    if os.environ.get("GITHUB_ACTIONS"):
        guard.write(lambda out: render_check_annotations(result, out))


def _open(path: str, mode: str) -> IO[str]:
    try:
        return open(path, mode, encoding="utf-8")
    except OSError as e:
        raise MemscopeError(f"cannot write {path}: {e.strerror}") from None


def _load_baseline(path: str) -> Report:
    if not os.path.exists(path):
        raise MemscopeError(f"no baseline at {path}; make one with "
                            f"--update-baseline --baseline {path}")
    return load_report(path)


def _same_target(base: Report | None, report: Report) -> None:
    """Refuse to compare figures compiled for different accelerators (``--target``)."""
    if base is None:
        return
    theirs, ours = (None if r.target is None else r.target.name for r in (base, report))
    if theirs != ours:
        def where(name: str | None) -> str:
            return name or "the machine that ran it (no --target)"
        raise MemscopeError(f"the baseline's figures are for {where(theirs)}, this run's for "
                            f"{where(ours)}: run with the baseline's --target, or make the "
                            "baseline again")
