"""The reader's views of a report: what a reader is shown, computed once for every renderer.

A report's records (:mod:`memscope.report`) hold the facts; these modules turn
them into what a reader needs first, so that the terminal, markdown, HTML,
check's renderers and the pytest plugin show the same answer:
:mod:`~memscope.views.summary` (per function its peak, findings, advice and
grouped leaves), :mod:`~memscope.views.view` (which functions a view shows,
chosen once), :mod:`~memscope.views.leaves` (leaves grouped by argument and
subtree, reasons merged, signatures abbreviated), and the texts every renderer
shares: :mod:`~memscope.views.run_text` (the run's high-water mark),
:mod:`~memscope.views.roles_text` (what a peak is made of) and
:mod:`~memscope.views.remat_text` (the checkpoint policies).

Pure: records in, dataclasses and plain text out, no markup. Views import the
records (and their units and paths) only; render, check, cli and the pytest
plugin import them (tests/test_layout.py holds both).
"""
