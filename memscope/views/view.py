"""What a view of a report shows, chosen once for every renderer.

:func:`choose_view` takes a report's summary and a renderer's bounds and
returns a :class:`View`: the functions in the answer and the figures, those
given a section, the names left quiet, what was left out and the peak rules'
texts. The terminal, markdown and HTML renderers draw it; none chooses again,
so the views agree by construction.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from memscope.report import Report
from memscope.views.summary import FunctionSummary, ReportSummary


def urgency(s: FunctionSummary) -> int:
    """0 for a function with a problem, 1 with a warning or advice, 2 with a note,
    3 with nothing to say: the order in which the renderers answer."""
    severities = {f.severity for f in s.findings}
    if "problem" in severities:
        return 0
    if "warning" in severities or s.advice is not None or s.remat_advice is not None:
        return 1
    return 2 if severities else 3


def most_urgent(functions: Sequence[FunctionSummary], limit: int | None) -> set[int]:
    """The positions of the functions a bounded view shows: all up to ``limit``,
    else the ``limit`` most urgent, the largest peaks first within each urgency,
    one signature of each function before a second of any: a run that compiled
    one function for many signatures (a test suite, a sweep) says the same of
    each, and the recompiles are told once, between calls."""
    order = range(len(functions))
    if limit is None or len(functions) <= limit:
        return set(order)
    ranked = sorted(order, key=lambda i: (urgency(functions[i]), -(functions[i].peak or 0)))
    seen: set[tuple[str, str | None]] = set()
    first: list[int] = []
    again: list[int] = []
    for i in ranked:
        name = (functions[i].name, functions[i].source)
        (again if name in seen else first).append(i)
        seen.add(name)
    return set((first + again)[:limit])


def worth_a_section(s: FunctionSummary) -> bool:
    """Whether a function gets a section of its own in a bounded view: a problem,
    something to change (:func:`urgency` below 2), or figures the user asked
    for (``asked_for``)."""
    return urgency(s) < 2 or s.asked_for


@dataclass(frozen=True)
class View:
    """What a view of a report shows, chosen once for every renderer: each draws
    it, and none chooses again."""

    #: the functions in the answer and the figures table (positions in the report)
    rows: frozenset[int]
    #: those rows in the order the answer gives them: most urgent first
    answer: tuple[int, ...]
    #: the functions given a section, in the report's order
    sections: tuple[int, ...]
    #: the names of rows with nothing to change, once each (not given a section)
    quiet: tuple[str, ...]
    #: functions worth a section that were not given one
    unsectioned: int
    #: there are more functions than rows: the answer then leaves out notes
    bounded: bool
    #: each peak rule's text and whether memscope computed the peaks it covers
    #: (:meth:`memscope.report.Report.peak_rule_notes`)
    peak_rules: tuple[tuple[str, bool], ...]


def choose_view(report: Report, summary: ReportSummary, *, rows: int | None,
                sections: int | None, sections_bounded: int | None = None,
                every_section: bool = False) -> View:
    """The view of ``report`` a renderer draws: at most ``rows`` functions in the
    answer and the figures (:func:`most_urgent`; ``None``: all), and a section
    for at most ``sections`` of them worth one (:func:`worth_a_section`), the
    most urgent first, or ``sections_bounded`` where the rows leave functions
    out; ``every_section`` gives every function one (``--detail``)."""
    functions = summary.functions
    shown = most_urgent(functions, rows)
    bounded = len(shown) < len(functions)
    limit = sections_bounded if bounded and sections_bounded is not None else sections
    worth = [i for i, s in enumerate(functions) if worth_a_section(s)]
    if every_section:
        chosen = list(range(len(functions)))
    else:
        ranked = sorted((i for i in worth if i in shown), key=lambda i: urgency(functions[i]))
        chosen = sorted(ranked if limit is None else ranked[:limit])
    quiet = () if every_section else tuple(dict.fromkeys(
        functions[i].name for i in sorted(shown) if not worth_a_section(functions[i])))
    return View(rows=frozenset(shown),
                answer=tuple(sorted(shown, key=lambda i: (urgency(functions[i]), i))),
                sections=tuple(chosen), quiet=quiet,
                unsectioned=0 if every_section else len(set(worth) - set(chosen)),
                bounded=bounded, peak_rules=report.peak_rule_notes())
