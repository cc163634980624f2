"""``memscope fit``: the largest batch that fits, found by compiling."""

from __future__ import annotations

import click

from memscope.cli._common import (
    given_target,
    module_option,
    stop_after_option,
    target_option,
)
from memscope.cli._pipes import PipeSafeHelp, printing
from memscope.flow import run_fit
from memscope.program.runner import Script, check_script
from memscope.render.fit import render_fit_json, render_fit_text
from memscope.render.plan import (
    render_plan_html,
    render_plan_json,
    render_plan_markdown,
    render_plan_text,
)
from memscope.render.progress import terminal_progress
from memscope.report.units import parse_size

#: ``memscope fit`` exits 1 when no batch size fits the budget.


@click.command(cls=PipeSafeHelp, context_settings={"allow_interspersed_args": False})
@module_option
@click.option("--function", metavar="NAME",
              help="The jitted function to forecast (default: the largest peak).")
@click.option("--batch", metavar="ARG[:AXIS]", multiple=True,
              help="An argument (name or position) and axis to resize (a negative axis "
                   "counts from the end: x:-1 is the last); repeat it to resize several "
                   "together (default: axis 0 of the arguments that are not state; the "
                   "output says which).")
@click.option("--memory", metavar="SIZE",
              help="The budget per device, e.g. 80GiB (default: the device's limit from "
                   "memory_stats(); CPU has none).")
@stop_after_option
@target_option
@click.option("--plan", "plan", is_flag=True,
              help="Find the largest batch for each setting instead: as written, the "
                   "advised donation, each checkpoint policy, the policy made from the "
                   "program's checkpoint_names, the offloading policies, and the best "
                   "policy with the advised donation; best first.")
@click.option("--format", "fmt", type=click.Choice(["text", "json", "markdown", "html"]),
              default="text",
              help="text (default), json (schema memscope.fit/1; with --plan "
                   "memscope.fit-plan/1), or, with --plan, markdown or html.")
@click.option("-q", "--quiet", is_flag=True,
              help="Do not show the compiles' progress (shown on stderr where it is a "
                   "terminal).")
@click.argument("program", metavar="SCRIPT")
@click.argument("args", nargs=-1, type=click.UNPROCESSED)
@click.pass_context
def fit(ctx: click.Context, as_module: bool, user_packages: tuple[str, ...], function: str | None, batch: tuple[str, ...],
        memory: str | None, stop_after: int | None, target_spec: str | None, plan: bool,
        fmt: str, quiet: bool, program: str, args: tuple[str, ...]) -> None:
    """Run SCRIPT [ARGS]... until its loop begins (a jitted signature called a
    second time, or --stop-after N calls), then compile the chosen function at
    other batch sizes (abstract arguments with the same shardings: nothing runs
    on the device) and print the largest batch whose peak fits the budget, also
    with the advised donation, each confirmed by compiling it and one size up.

    With --plan, the same search for each memory trade (donation, checkpoint
    policies, offloading), best first by batch, then by FLOPs per example.

    The budget is --memory, or the device's limit, less what the process holds
    outside the function's arguments. With --target, the compiles are the
    target's (XLA:TPU, XLA:GPU) and the limit is its chip's memory (a GPU's:
    the room JAX's allocator gives a program, 75% of it unless
    XLA_CLIENT_MEM_FRACTION sets another; the output says which). Each
    compile is shown on stderr while it runs, where stderr is a terminal
    (not with -q). Exit codes:
    0 a batch fits; 1 none fits;
    2 bad input (no function captured, an unknown --function or --batch, no
    budget on a device without a limit, a function that does not trace or
    compile at another size with what --batch resizes, an axis whose size the
    step's FLOPs do not grow with: the output says so, and gives no batch).
    """
    if fmt in ("markdown", "html") and not plan:
        raise click.UsageError(f"--format {fmt} is --plan's: fit alone writes text or json")
    what = Script(program, tuple(args), module=as_module,
                  packages=user_packages)
    check_script(what)
    budget = parse_size(memory) if memory is not None else None
    chips = given_target(target_spec)
    with terminal_progress(quiet) as progress:  # gone before the answer is printed
        done = run_fit(what, function=function, batch=batch, memory=budget,
                       stop_after=stop_after, target=chips, plan=plan, progress=progress)
    if done.plan is not None:
        render = {"json": lambda p, f: render_plan_json(p, f, outcome=done.outcome),
                  "markdown": render_plan_markdown, "html": render_plan_html,
                  "text": render_plan_text}[fmt]
        with printing() as out:
            render(done.plan, out)
    elif done.forecast is not None and fmt == "json":
        with printing() as out:
            render_fit_json(done.forecast, out, outcome=done.outcome)
    elif done.forecast is not None:
        with printing() as out:
            render_fit_text(done.forecast, out)
    ctx.exit(done.status)
