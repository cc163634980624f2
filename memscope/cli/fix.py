"""``memscope fix``: write the advice into the script's jit calls, and measure again."""

from __future__ import annotations

import sys

import click

from memscope.cli._common import misplaced_hint, module_option
from memscope.cli._pipes import PipeSafeHelp, printing
from memscope.errors import EXIT_FIX_REFUSED, EXIT_FIX_UNVERIFIED, MemscopeError
from memscope.fix import plan as fixing
from memscope.program.runner import Script, check_script
from memscope.render.fix import render_checks, render_fix_diff, render_problems


@click.command(cls=PipeSafeHelp, context_settings={"allow_interspersed_args": False})
@module_option
@click.option("--write", is_flag=True,
              help="Apply the edits to the files, then run the script again under "
                   "memscope and compare with the advice (default: print the diff).")
@click.option("--function", "functions", multiple=True, metavar="NAME",
              help="Only fix this function (repeat for more).")
@click.option("--keep", is_flag=True,
              help="With --write: keep the edits even where the measurement differs "
                   "from the advice (default: restore the files).")
@click.option("--stop-after", type=click.IntRange(min=1), metavar="N",
              default=fixing.DEFAULT_STOP_AFTER, show_default=True,
              help="End each run of the script once N jitted calls have run.")
@click.argument("program", metavar="SCRIPT")
@click.argument("args", nargs=-1, type=click.UNPROCESSED)
@click.pass_context
def fix(ctx: click.Context, as_module: bool, user_packages: tuple[str, ...], write: bool, functions: tuple[str, ...],
        keep: bool, stop_after: int, program: str, args: tuple[str, ...]) -> None:
    """Write memscope's donation advice into SCRIPT's own jit calls.

    Runs SCRIPT [ARGS]... under memscope (stopping early, in a fresh process)
    and, for each function with advice, edits the jax.jit call, decorator,
    partial(jax.jit, ...), eqx.filter_jit or nnx.jit that jitted it: a unified
    diff, or with --write the files themselves, measured again after.

    Exit codes: 0 done (or nothing to fix); 2 bad input; 3 the script failed;
    5 an edit was refused (nothing written); 6 the edited program measured
    differently from the advice (files restored unless --keep).
    """
    what = Script(program, tuple(args), module=as_module,
                     packages=user_packages)
    check_script(what)
    try:
        before = fixing.measure_script(what, stop_after=stop_after, advice="advised")
    except MemscopeError as e:  # memscope's options after SCRIPT went to the script
        hint = misplaced_hint(ctx, args, "memscope fix --write train.py --steps 5")
        raise MemscopeError(f"{e}{hint}", exit_code=e.exit_code) from None
    plan = fixing.plan_fix(before, functions or None)
    render_problems(plan, sys.stderr)
    if plan.refusals:
        with printing() as out:
            render_fix_diff(plan, out)
        click.echo("memscope fix: nothing written (an edit was refused)", err=True)
        ctx.exit(EXIT_FIX_REFUSED)
    if not plan.changes:
        click.echo("memscope fix: nothing to fix: no function has advice to write", err=True)
        ctx.exit(0)
    if not write:
        with printing() as out:
            render_fix_diff(plan, out)
        ctx.exit(0)
    fixing.apply(plan.changes)
    try:
        after = fixing.measure_script(what, stop_after=stop_after, advice="off")
    except BaseException:
        fixing.restore(plan.changes)
        raise
    checks = fixing.verify(plan.functions, after)
    with printing() as out:
        render_checks(checks, out)
        if all(c.as_advised for c in checks):
            click.echo(f"memscope fix: wrote {', '.join(c.path for c in plan.changes)}",
                       file=out)
    if all(c.as_advised for c in checks):
        ctx.exit(0)
    if keep:
        click.echo("memscope fix: the measurement differs from the advice; kept the edits "
                   "(--keep)", err=True)
    else:
        fixing.restore(plan.changes)
        click.echo("memscope fix: the measurement differs from the advice; restored "
                   f"{', '.join(c.path for c in plan.changes)}", err=True)
    ctx.exit(EXIT_FIX_UNVERIFIED)
