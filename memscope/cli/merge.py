"""``memscope merge``: one report from the per-process reports of a multi-process run."""

from __future__ import annotations

import click

from memscope.cli._common import check_writable
from memscope.cli._pipes import PipeSafeHelp, printing
from memscope.render.text import visible
from memscope.report import load_report, save_report
from memscope.report.merge import merge_reports


@click.command(cls=PipeSafeHelp)
@click.option("-o", "--output", metavar="FILE.json", required=True,
              help="Where to write the merged report.")
@click.argument("reports", metavar="REPORT.json...", nargs=-1, required=True)
def merge(output: str, reports: tuple[str, ...]) -> None:
    """Merge the reports the processes of one jax.distributed run wrote (one each,
    with `memscope run -o`) into one report that show, diff and check read.
    """
    check_writable(output)
    merged = merge_reports([(path, load_report(path)) for path in reports])
    save_report(merged, output)
    processes = len(merged.merged_from)
    with printing() as out:
        click.echo(f"memscope: merged {processes} processes, {len(merged.functions)} "
                   f"function{'s' if len(merged.functions) != 1 else ''}, into "
                   f"{visible(output)}", file=out)
