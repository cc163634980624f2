"""memscope's printing on a stdout whose reader may go away (``memscope show
r.json | head -1``): the reader's leaving ends the printing, not the command, so
the files a command writes are written and its exit code is its own. The
commands' output, their ``--help`` and ``--version`` all print this way; the
program's own ``sys.stdout`` is never replaced (what it prints into a closed
pipe meets it as under python)."""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable, Iterator
from typing import Any, TextIO, TypeVar, cast

import click

from memscope.program.ending import PipeSafe

F = TypeVar("F", bound=Callable[..., Any])


@contextlib.contextmanager
def printing() -> Iterator[TextIO]:
    """``sys.stdout`` for what a command prints, silent once its reader has gone."""
    out = PipeSafe(sys.stdout)
    try:
        yield cast(TextIO, out)
    finally:
        out.flush()


def _show_help(ctx: click.Context, param: click.Parameter, value: bool) -> None:
    # click's own callback, printing through printing(): click turns a broken
    # pipe into exit code 1, where the help's is 0.
    if not value or ctx.resilient_parsing:
        return
    with printing() as out:
        click.echo(ctx.get_help(), file=out, color=ctx.color)
    ctx.exit()


class PipeSafeHelp(click.Command):
    """A command whose ``--help`` prints as its output does (:func:`printing`)."""

    def get_help_option(self, ctx: click.Context) -> click.Option | None:
        option = super().get_help_option(ctx)
        if option is not None:
            option.callback = _show_help
        return option


def version_option(version: str, distribution: str) -> Callable[[F], F]:
    """``--version``: ``memscope, version X``, printed as a command's output is;
    on stderr, a line per other distribution installed into the same ``memscope``
    import package (:func:`memscope.version.sharing_the_import_name`), which
    ``distribution`` (the name to install) cannot share it with.
    """

    def show(ctx: click.Context, param: click.Parameter, value: bool) -> None:
        if not value or ctx.resilient_parsing:
            return
        from memscope.version import sharing_the_import_name

        with printing() as out:
            click.echo(f"memscope, version {version}", file=out, color=ctx.color)
        for other in sharing_the_import_name():
            click.echo(f"memscope: {other} is installed here too, into the same import "
                       f"package memscope, so each overwrites the other's files: "
                       f"pip uninstall both, then pip install {distribution}", err=True)
        ctx.exit()

    return click.option("--version", is_flag=True, expose_value=False, is_eager=True,
                        callback=show, help="Show the version and exit.")
