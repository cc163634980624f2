"""A pytest that a test runs inside itself (pytester, or a subprocess) loads
memscope's plugin as a user's pytest does, and no other installed plugin."""

from __future__ import annotations

import importlib.metadata


def only_memscope_plugin() -> list[str]:
    """``-p no:NAME`` for every pytest plugin installed through an entry point but
    memscope's, which still loads from its own entry point, without a flag.

    The inner pytest would otherwise load whatever the outer environment has: a GPU
    image's pytest-benchmark, inside a pytest-xdist worker (``PYTEST_XDIST_WORKER``
    is inherited), warns when it starts, and under warnings as errors (the outer
    suite's filters still apply in pytester's in-process runs) every inner run
    ended in an INTERNALERROR.
    """
    names = {ep.name for ep in importlib.metadata.entry_points(group="pytest11")}
    return [arg for name in sorted(names - {"memscope"}) for arg in ("-p", f"no:{name}")]
