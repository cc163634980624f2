"""The ``memscope`` command: a click group that glues subcommands to the library.

The one exception boundary: library code raises :class:`MemscopeError`, and the
group turns it into ``memscope: error: ...`` on stderr and its exit code.
"""

from __future__ import annotations

from typing import Any

import click

from memscope.cli.check import check
from memscope.cli.diff import diff
from memscope.cli.merge import merge
from memscope.cli.run import run
from memscope.cli.show import show
from memscope.errors import MemscopeError
from memscope.version import __version__


class _Group(click.Group):
    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except MemscopeError as e:
            click.echo(f"memscope: error: {e}", err=True)
            ctx.exit(e.exit_code)


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="memscope")
def cli() -> None:
    """Where did my accelerator memory go, and is donation doing what I think?

    memscope runs a JAX program, captures every jax.jit function it calls and
    reads what XLA compiled for each: memory figures, and what happens to every
    input and output buffer (aliased, donor, unusable, pruned, copied).
    """


cli.add_command(run)
cli.add_command(diff)
cli.add_command(check)
cli.add_command(merge)
cli.add_command(show)


def main() -> None:
    cli(prog_name="memscope")
