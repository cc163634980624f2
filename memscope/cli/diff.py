"""``memscope diff``: what another donation would change, or what changed between reports."""

from __future__ import annotations

from collections.abc import Sequence
from functools import partial
from typing import Any

import click

from memscope.check.compare import FunctionDiff, compare_reports, compare_variant, diffs_json
from memscope.check.config import load_config
from memscope.cli._common import (
    misplaced_hint,
    module_option,
    nothing_called,
    output_option,
    output_paths,
    stop_after_option,
)
from memscope.cli._pipes import PipeSafeHelp, printing
from memscope.errors import EXIT_USAGE, MemscopeError
from memscope.flow import run_and_report
from memscope.program.ending import Guard
from memscope.program.runner import Script, check_script
from memscope.render.diff import render_diff
from memscope.report import FunctionReport, load_report, save_report, write_whole
from memscope.variants.donation import VariantRequest, parse_donation


@click.command(cls=PipeSafeHelp, context_settings={"allow_interspersed_args": False})
@click.option("--donate", "spec", metavar="SPEC",
              help="The donation to compare with the one written: argument numbers "
                   "(0 or 0,2), argument names (opt_state), all, or none.")
@click.option("--function", "functions", metavar="NAME", multiple=True,
              help="Compare only this function (repeatable); all by default.")
@click.option("--only-changed", is_flag=True, help="Leave out functions that are the same.")
@module_option
@stop_after_option
@output_option
@click.argument("program", metavar="SCRIPT|OLD.json")
@click.argument("args", nargs=-1, type=click.UNPROCESSED)
@click.pass_context
def diff(ctx: click.Context, spec: str | None, functions: tuple[str, ...], only_changed: bool,
         as_module: bool, user_packages: tuple[str, ...], stop_after: int | None, output: str | None, program: str,
         args: tuple[str, ...]) -> None:
    """Compare a script's functions as written with another donation, each compiled
    and measured:

      memscope diff --donate opt_state train.py [ARGS]...

    or compare two saved reports, function by function:

      memscope diff [--only-changed] OLD.json NEW.json

    memscope's options go before SCRIPT; everything after it goes to the script,
    which runs as under `memscope run`. The exit code is the script's own (0 when
    --stop-after ended it), or 2 when a SPEC or function name does not apply.
    """
    if program.endswith(".json") and not as_module:
        if len(args) != 1 and any(a.startswith("-") for a in args):
            raise MemscopeError("memscope's options go before the reports, as in memscope "
                                "diff --only-changed OLD.json NEW.json")
        _diff_reports(program, args, spec, functions, only_changed, stop_after, output)
        return
    if spec is None:
        hint = misplaced_hint(ctx, args, "memscope diff --donate 0 train.py --lr 3e-4")
        raise MemscopeError("give the donation to compare with --donate SPEC (argument "
                            "numbers, names, all or none); to compare two reports give "
                            "OLD.json NEW.json" + hint)
    request = VariantRequest(parse_donation(spec), frozenset(functions) or None)
    what = Script(program, tuple(args), module=as_module,
                     packages=user_packages)
    check_script(what)
    saved = output_paths(what, output=output)["output"]
    guard = ctx.with_resource(Guard())
    report = run_and_report(what, request=request, stop_after=stop_after, guard=guard,
                            deliver=None if saved is None else partial(save_report, path=saved))
    assert report.run is not None
    if not report.functions:
        click.echo(nothing_called(program, report.run.outcome,
                                  misplaced_hint(ctx, args, "memscope diff --donate 0 train.py --lr 3e-4")), err=True)
        ctx.exit(report.run.exit_code or EXIT_USAGE)
    chosen = _chosen(report.functions, functions)
    diffs = [compare_variant(fn, v) for fn in chosen
             if (v := fn.variant("requested")) is not None]
    shown = [d for d in diffs if not (only_changed and d.verdict == "same")]
    guard.write(lambda out: render_diff(f"{program}: as written vs --donate {spec}", shown,
                                        out, before="as written", after=f"--donate {spec}"))
    failed = [d for d in diffs if d.verdict == "error"]
    if failed:
        raise MemscopeError(f"{failed[0].name}: {failed[0].error}")
    ctx.exit(report.run.exit_code)


def _diff_reports(old_path: str, args: Sequence[str], spec: str | None,
                  functions: Sequence[str], only_changed: bool, stop_after: Any,
                  output: str | None) -> None:
    if spec is not None or stop_after is not None:
        raise MemscopeError("--donate and --stop-after apply to a script; two reports are "
                            "compared as they were saved")
    if len(args) != 1:
        raise MemscopeError("give two reports to compare: memscope diff OLD.json NEW.json")
    old, new = load_report(old_path), load_report(args[0])
    # The tolerances memscope check would use here, so both give one verdict.
    diffs: Sequence[FunctionDiff] = compare_reports(old, new, load_config().tolerances)
    if functions:
        _chosen((*old.functions, *new.functions), functions)  # unknown names are errors
        diffs = [d for d in diffs if d.name in functions]
    if only_changed:
        diffs = [d for d in diffs if d.verdict != "same"]
    with printing() as out:
        render_diff(f"{old_path} -> {args[0]}", diffs, out, before="old", after="new")
    if output is not None:
        write_whole(output, diffs_json(old_path, args[0], diffs))


def _chosen(captured: Sequence[FunctionReport], names: Sequence[str]
            ) -> list[FunctionReport]:
    """The functions named (all if none), in report order.

    Raises:
        MemscopeError: a name no captured function has; the message lists them.
    """
    known = list(dict.fromkeys(fn.name for fn in captured))
    for name in names:
        if name not in known:
            raise MemscopeError(f"--function {name}: no captured function has that name; "
                                f"captured: {', '.join(known)}")
    return [fn for fn in captured if not names or fn.name in names]

