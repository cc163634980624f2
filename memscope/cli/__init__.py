"""The ``memscope`` command: a click group that glues subcommands to the library.

The one exception boundary: library code raises :class:`MemscopeError`, and the
group turns it into ``memscope: error: ...`` on stderr and its exit code.
"""

from __future__ import annotations

import gc
import importlib
from typing import Any

import click

from memscope.errors import MemscopeError
from memscope.render.text import visible
from memscope.version import __version__

#: Each subcommand's module, imported when that subcommand runs (or help lists
#: them): `memscope run` then pays for none of the others' imports.
COMMANDS = {name: f"memscope.cli.{name}" for name in ("run", "diff", "check", "merge", "show",
                                                         "fit", "fix")}


def _import(module: str) -> Any:
    """Import ``module`` with Python's cyclic garbage collector paused.

    A subcommand's import (JAX's with ``memscope run``'s) creates hundreds of
    thousands of objects that live for the whole process, and every few hundred
    of them the collector walks the young ones, and now and then all of them:
    about 0.1 s of ``memscope run``'s start, which a short program feels. The
    collector runs again as usual, as it was, before any code of the program's.
    """
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        return importlib.import_module(module)
    finally:
        if was_enabled:
            gc.enable()


class _Group(click.Group):
    def list_commands(self, ctx: click.Context) -> list[str]:
        return list(COMMANDS)

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        if name not in COMMANDS:
            return None
        command: click.Command = getattr(_import(COMMANDS[name]), name)
        return command

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except MemscopeError as e:
            click.echo(f"memscope: error: {visible(str(e))}", err=True)
            ctx.exit(e.exit_code)


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="memscope")
def cli() -> None:
    """Where did my accelerator memory go, and is donation doing what I think?

    memscope runs a JAX program, captures every jax.jit function it calls and
    reads what XLA compiled for each: memory figures, and what happens to every
    input and output buffer (aliased, donor, unusable, pruned, copied).
    """



def main() -> None:
    cli(prog_name="memscope")
