"""``memscope bisect``: which release of JAX (or of a framework) moved a
function's memory figures, and what of its peak moved.

The flow, one module each: :mod:`~memscope.bisect.releases` (the releases the
package index has in the range asked), :mod:`~memscope.bisect.pythons` (the
Pythons on this machine), :mod:`~memscope.bisect.environments` (one environment
per release, built with uv and kept in memscope's folder of environments),
:mod:`~memscope.bisect.child` (the program run under memscope there, the
report written), :mod:`~memscope.bisect.search` (which releases to try: the
two ends, then halving; what moved where) and :mod:`~memscope.bisect.passes`
(which XLA pass, disabled in the newer release, brings the figures back).
"""
