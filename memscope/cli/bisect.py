"""``memscope bisect``: which release moved a function's memory, by building an
environment per release and running the program under memscope in it."""

from __future__ import annotations

import click

from memscope.cli._common import check_writable, module_option, target_option
from memscope.cli._pipes import PipeSafeHelp, printing
from memscope.errors import EXIT_INTERRUPTED, EXIT_PROGRAM_FAILED, MemscopeError
from memscope.program.runner import Script, check_script
from memscope.report import write_whole
from memscope.report.units import parse_percent


@click.command(cls=PipeSafeHelp, context_settings={"allow_interspersed_args": False})
@click.option("--jax", "jax_range", metavar="FROM..TO",
              help="The JAX releases to bisect, both ends included (jaxlib at the same "
                   "version), e.g. 0.9.0..0.10.2.")
@click.option("--package", "package", nargs=2, metavar="NAME FROM..TO",
              help="Bisect a framework's releases instead (flax, optax, equinox, ...; "
                   "libtpu with --target tpu:...), with your JAX fixed.")
@click.option("--function", metavar="NAME",
              help="Only this jitted function; each run stops once it has run.")
@click.option("-o", "--output", metavar="FILE.json",
              help="Also write the bisect as JSON: every release tried, and each move.")
@click.option("--min-change", "min_change", metavar="PCT", default="1%", show_default=True,
              help="A figure moved when it changed by more than this share of the "
                   "larger of its two values.")
@click.option("--no-passes", is_flag=True,
              help="Do not compile the newer release again with each XLA pass "
                   "disabled to tell which pass made a move.")
@click.option("-q", "--quiet", is_flag=True,
              help="Do not show progress (on a terminal a live line on stderr, else "
                   "one line per step).")
@module_option
@target_option
@click.argument("program", metavar="SCRIPT")
@click.argument("args", nargs=-1, type=click.UNPROCESSED)
def bisect(jax_range: str | None, package: tuple[str, str] | None, function: str | None,
           output: str | None, min_change: str, no_passes: bool, quiet: bool,
           as_module: bool,
           user_packages: tuple[str, ...], target_spec: str | None, program: str,
           args: tuple[str, ...]) -> None:
    """Find the release that moved a function's memory figures: each release
    tried in an environment of its own (built with uv from the package index,
    kept for the next bisect), the program run there under memscope, the two
    ends first, then halving:

      memscope bisect --jax 0.9.0..0.10.2 train.py [ARGS]...

      memscope bisect --package flax 0.11.0..0.12.6 -m pkg.train

    It says which function's figures moved between which two releases, what
    of the peak moved (as memscope diff explains two reports), and which XLA
    pass, disabled on the newer release, brings them back (where one does).
    Progress goes to stderr: a live line on a terminal, else one line per
    step (none with -q). Exit codes: 0 answered (a move or none), 2 usage
    or input error, 3 the program ran on no release tried, 130 interrupted
    (what was tried is printed and written).
    """
    from memscope.bisect.releases import Range
    from memscope.bisect.run import Request, run_bisect
    from memscope.render.bisect import render_bisect, render_bisect_json
    from memscope.render.progress import terminal_progress

    if (jax_range is None) == (package is None):
        raise click.UsageError("give the releases to bisect: --jax FROM..TO, or "
                               "--package NAME FROM..TO")
    if output is not None:
        check_writable(output, "-o")
    name, text = ("jax", jax_range) if package is None else (package[0].lower(), package[1])
    if name in ("jaxlib",):
        raise MemscopeError("jaxlib moves with JAX: bisect it with --jax FROM..TO")
    fraction = parse_percent(min_change) / 100.0
    script = Script(program, tuple(args), module=as_module, packages=user_packages)
    check_script(script)
    request = Request(script, name, Range.parse(text or ""), function=function,
                      target_spec=target_spec, min_change=fraction, passes=not no_passes)

    with terminal_progress(quiet, lines="memscope bisect") as progress:
        result = run_bisect(request, progress=progress)
    if output is not None:
        write_whole(output, render_bisect_json(result))
    with printing() as out:
        render_bisect(result, out)
    if result.interrupted:
        raise SystemExit(EXIT_INTERRUPTED)
    if not any(t.status == "ran" for t in result.tried):
        raise SystemExit(EXIT_PROGRAM_FAILED)
