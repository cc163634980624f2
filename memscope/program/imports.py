"""Doing something the moment the program imports a module, and not before.

``memscope run`` must not import JAX ahead of the program: JAX reads settings
from the environment when it is imported (``JAX_ENABLE_X64``,
``JAX_PLATFORMS``, ``JAX_DEFAULT_MATMUL_PRECISION``, its logging), and a
program that sets them before its own ``import jax`` must get them, as under
python. :func:`when_imported` runs a callback right after the module's own code
has run, inside the program's ``import`` statement, before the program's next
line: the capture is set up there, on the JAX the program configured.
"""

from __future__ import annotations

import contextlib
import importlib.abc
import importlib.machinery
import sys
import threading
import types
from collections.abc import Callable, Iterator, Sequence
from typing import Any

Callback = Callable[[types.ModuleType], None]


class _Loader(importlib.abc.Loader):
    """The module's own loader, with the callback run once its code has."""

    def __init__(self, loader: Any, callback: Callback) -> None:
        self._loader = loader
        self._callback = callback

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType | None:
        create = getattr(self._loader, "create_module", None)
        return None if create is None else create(spec)

    def exec_module(self, module: types.ModuleType) -> None:
        # The module is the real loader's: its __loader__ stays the real one.
        spec = module.__spec__
        if spec is not None:
            spec.loader = self._loader
        with contextlib.suppress(AttributeError):
            module.__loader__ = self._loader
        self._loader.exec_module(module)
        self._callback(module)

    def __getattr__(self, name: str) -> Any:  # get_code, get_source, ... as the real one's
        return getattr(self._loader, name)


class _Finder(importlib.abc.MetaPathFinder):
    """Finds nothing itself: it asks the other finders for ``name`` and hands
    back their spec with :class:`_Loader` around its loader, once."""

    def __init__(self, name: str, callback: Callback) -> None:
        self.name = name
        self._callback = callback
        self._local = threading.local()
        self.fired = False

    def find_spec(self, fullname: str, path: Sequence[str] | None = None,
                  target: types.ModuleType | None = None
                  ) -> importlib.machinery.ModuleSpec | None:
        if fullname != self.name or self.fired or getattr(self._local, "busy", False):
            return None
        self._local.busy = True  # the other finders may look for it again
        try:
            spec = _find_with_others(self, fullname, path, target)
        finally:
            self._local.busy = False
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        self.fired = True
        spec.loader = _Loader(spec.loader, self._fire)
        return spec

    def _fire(self, module: types.ModuleType) -> None:
        with contextlib.suppress(ValueError):
            sys.meta_path.remove(self)
        self._callback(module)


def _find_with_others(me: _Finder, fullname: str, path: Sequence[str] | None,
                      target: types.ModuleType | None) -> importlib.machinery.ModuleSpec | None:
    for finder in list(sys.meta_path):
        if finder is me:
            continue
        find = getattr(finder, "find_spec", None)
        if find is None:
            continue
        spec = find(fullname, path, target)
        if spec is not None:
            return spec
    return None


@contextlib.contextmanager
def when_imported(name: str, callback: Callback) -> Iterator[None]:
    """Within the block, call ``callback(module)`` once the top-level module
    ``name`` has been imported, right after its own code ran; at once if it is
    imported already. The callback must not raise: whatever it raises goes to
    the importing code, which is the program's."""
    if name in sys.modules:
        callback(sys.modules[name])
        yield
        return
    finder = _Finder(name, callback)
    sys.meta_path.insert(0, finder)
    try:
        yield
    finally:
        with contextlib.suppress(ValueError):
            sys.meta_path.remove(finder)
