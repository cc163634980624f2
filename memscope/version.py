"""memscope's version: the one place it is written (pyproject.toml reads it).

A constant rather than ``importlib.metadata.version("memscope")``: asking the
installed metadata scans every distribution on ``sys.path``, about 30 ms of
every ``memscope run`` before the program starts.
"""

__version__ = "0.1.0"
