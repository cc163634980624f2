"""Pure: the reports of the processes of one ``jax.distributed`` run -> one report.

Each process of a multi-process run writes its own report (``memscope run -o``
in every process); each is tagged with its ``process_index`` and
``process_count``. Merging keeps every function once where all processes
compiled it alike (same name, signature and figures: the usual SPMD case),
listing the processes in ``processes``; a function whose figures differ between
processes stays once per process, so nothing is averaged away.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from memscope.errors import ReportFormatError
from memscope.report import Environment, FunctionReport, ProcessPart, Report


def merge_reports(parts: Sequence[tuple[str, Report]]) -> Report:
    """Merge ``(file, report)`` pairs, one per process, into one report.

    Raises:
        ReportFormatError: fewer than two reports, a report that is already
            merged, process counts that disagree, or a process given twice.
    """
    if len(parts) < 2:
        raise ReportFormatError("give the reports of two or more processes to merge")
    counts = {report.environment.process_count for _, report in parts}
    if len(counts) != 1:
        raise ReportFormatError(f"the reports disagree on the process count ({sorted(counts)}); "
                                "they are not from one run")
    seen: dict[int, str] = {}
    for file, report in parts:
        if report.merged_from:
            raise ReportFormatError(f"{file} is a merged report already; merge the "
                                    "per-process reports instead")
        index = report.environment.process_index
        if index in seen:
            raise ReportFormatError(f"{seen[index]} and {file} are both process {index}; "
                                    "give one report per process")
        seen[index] = file
    ordered = sorted(parts, key=lambda part: part[1].environment.process_index)
    first = ordered[0][1]
    return Report(
        memscope_version=first.memscope_version,
        environment=_environment([report.environment for _, report in ordered]),
        run=first.run,
        functions=_functions([report for _, report in ordered]),
        runtime=first.runtime,
        merged_from=tuple(ProcessPart(r.environment.process_index, file, r.run)
                          for file, r in ordered))


def _environment(environments: Sequence[Environment]) -> Environment:
    devices = {d.id: d for env in environments for d in env.devices}
    return replace(environments[0], devices=tuple(devices[i] for i in sorted(devices)))


def _functions(reports: Sequence[Report]) -> tuple[FunctionReport, ...]:
    merged: list[FunctionReport] = []
    for report in reports:
        index = report.environment.process_index
        for fn in report.functions:
            same = next((i for i, m in enumerate(merged) if _alike(m, fn)), None)
            if same is None:
                merged.append(replace(fn, processes=(index,)))
            else:
                m = merged[same]
                merged[same] = replace(m, calls=m.calls + fn.calls,
                                       processes=(*m.processes, index))
    return tuple(merged)


def _alike(a: FunctionReport, b: FunctionReport) -> bool:
    return ((a.name, a.source, a.signature, a.memory) == (b.name, b.source, b.signature, b.memory)
            and [(x.path, x.fate) for x in a.inputs] == [(x.path, x.fate) for x in b.inputs])
