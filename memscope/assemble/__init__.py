"""Assembling the report: captured entries in, :class:`~memscope.report.Report` out.

The stage after the capture and the analysis: it reads what
:mod:`memscope.capturing` recorded, has :mod:`memscope.analysis` classify it,
and freezes the records :mod:`memscope.report` defines (which import no
stage). :mod:`~memscope.assemble.function`: one function's report and its
post-mortem; :mod:`~memscope.assemble.run`: the run's.
"""
