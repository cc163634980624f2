"""The ``memscope`` command: a click group that glues subcommands to the library.

The one exception boundary: library code raises :class:`MemscopeError`, and the
group turns it into ``memscope: error: ...`` on stderr and its exit code; click's
own errors (an unknown option or command, a missing argument, a bad value) are
turned into one such line too, exit code 2.
"""

from __future__ import annotations

import gc
import importlib
from typing import Any

import click

from memscope.cli._pipes import PipeSafeHelp, version_option
from memscope.errors import EXIT_USAGE, MemscopeError
from memscope.render.text import visible
from memscope.version import DISTRIBUTION, __version__

#: Each subcommand's module, imported when that subcommand runs (or help lists
#: them): `memscope run` then pays for none of the others' imports.
COMMANDS = {name: f"memscope.cli.{name.replace('-', '_')}"
            for name in ("run", "diff", "check", "merge", "show", "fit", "fix",
                         "bisect", "install-compiler")}


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


class _Group(PipeSafeHelp, click.Group):
    def list_commands(self, ctx: click.Context) -> list[str]:
        return list(COMMANDS)

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        if name not in COMMANDS:
            return None
        command: click.Command = getattr(_import(COMMANDS[name]), name.replace("-", "_"))
        return command

    def make_context(self, info_name: str | None, args: list[str],
                     parent: click.Context | None = None, **extra: Any) -> click.Context:
        # The group's own options and arguments (`memscope --bogus`) are parsed here.
        try:
            return super().make_context(info_name, args, parent=parent, **extra)
        except click.ClickException as e:
            raise _one_line(e, info_name or "memscope") from None

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except MemscopeError as e:
            click.echo(f"memscope: error: {visible(str(e))}", err=True)
            ctx.exit(e.exit_code)
        except click.ClickException as e:
            # An unknown subcommand, or any subcommand's parsing or callback.
            path = ctx.command_path
            if ctx.invoked_subcommand is not None:
                path = f"{path} {ctx.invoked_subcommand}"
            raise _one_line(e, path) from None


class _UsageLine(click.ClickException):
    """A click error said as memscope says errors: one line on stderr, exit code 2.

    click's own block (usage, "Try ... for help.", a blank line, "Error: ...")
    is four lines that a log or a CI job shows as one failure spread out.
    """

    exit_code = EXIT_USAGE

    def __init__(self, message: str, help_path: str) -> None:
        super().__init__(message)
        self.help_path = help_path

    def show(self, file: Any = None) -> None:
        message = self.message.rstrip().removesuffix(".")
        if message[:1].isupper() and message[1:2].islower():
            message = message[0].lower() + message[1:]  # "Missing argument", house case
        click.echo(f"memscope: error: {visible(message)} (see '{self.help_path} --help')",
                   err=True)


#: click 8.2's error for the bare group, whose "message" is the whole help
#: (click 8.1 prints the help and exits 0 instead).
_NO_ARGS_IS_HELP: Any = getattr(click.exceptions, "NoArgsIsHelpError", ())


def _one_line(error: click.ClickException, path: str) -> click.ClickException:
    """``error`` as one line naming the help of the command it is about (``path``,
    ``memscope run``); the bare group's help (``memscope`` alone) stays as click
    prints it."""
    if isinstance(error, (_UsageLine, _NO_ARGS_IS_HELP)):
        return error
    if isinstance(error, click.UsageError) and error.ctx is not None:
        path = error.ctx.command_path
    return _UsageLine(error.format_message(), path)


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
@version_option(__version__, DISTRIBUTION)
def cli() -> None:
    """Where did my accelerator memory go, and is donation doing what I think?

    memscope runs a JAX program, captures every jax.jit function it calls and
    reads what XLA compiled for each: memory figures, and what happens to every
    input and output buffer (aliased, donor, unusable, pruned, copied).
    """



def main() -> None:
    cli(prog_name="memscope")
