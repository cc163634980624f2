"""``memscope install-compiler``: XLA's compilers for ``--target``, kept apart from JAX."""

from __future__ import annotations

import click

from memscope.cli._pipes import PipeSafeHelp, printing

#: the command's names for :mod:`memscope.compiled.targets.compilers`' kinds
KINDS = {"tpu": "tpu", "gpu": "cuda"}


@click.command(cls=PipeSafeHelp, name="install-compiler")
@click.argument("kinds", metavar="tpu|gpu...", nargs=-1, required=True,
                type=click.Choice(list(KINDS)))
def install_compiler(kinds: tuple[str, ...]) -> None:
    """Install XLA's compiler for --target tpu:... (libtpu) or --target gpu:...
    (JAX's CUDA plugin and ptxas) at the versions this JAX pins, into memscope's
    own folder ($MEMSCOPE_COMPILERS_DIR, else ~/.cache/memscope-compilers), where
    JAX does not load it into your programs. --target installs it too, the first
    time; this is for a machine that will compile offline, or CI.
    """
    from memscope.compiled.targets import compilers

    # A reader gone after the first kind's line does not stop the second's install.
    with printing() as out:
        for kind in kinds:
            kept = compilers.kept_compiler(KINDS[kind])
            if compilers.in_environment(kept.kind):
                click.echo(f"memscope: {kept.title} is installed in this Python "
                           "environment, where JAX loads it itself; memscope uses that one",
                           file=out)
            elif kept.installed:
                click.echo(f"memscope: {kept.title} is installed: {kept.folder}", file=out)
            else:
                compilers.install(kept)
                click.echo(f"memscope: installed {kept.title}: {kept.folder}", file=out)
