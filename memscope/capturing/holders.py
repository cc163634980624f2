"""Which variable of the user's code holds an array: read without running any of it.

:mod:`memscope.capturing.residency` names the holders of the arrays it samples
(the run's high-water mark, what keeps growing): a local of a frame of the
user's code, a global of its module, an entry of a notebook's output history,
looking inside lists, tuples, dicts, sets and the attributes of the user's
objects, never through code of the program's (no pytree flattening, no
property, no overridden container method).
"""

from __future__ import annotations

import contextlib
import sys
import types
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import jax
import numpy as np

from memscope import _python
from memscope.analysis.run_memory import OUTPUT_HISTORY, Holder
from memscope.program import sites

#: Leaves looked at in one variable of the user's when naming holders.
MAX_HOLDER_LEAVES = 100_000


@dataclass(frozen=True)
class OutputHistory:
    """An interactive shell's record of the values its cells showed, kept in the
    program's globals (IPython's ``Out``, with ``_3``, ``_``, ``__`` naming its
    entries again): an array held there is named by its entry (``Out[3]``), and
    only where no name of the user's holds it.

    ``namespace`` is the program's globals (the shell's user namespace),
    ``outputs`` the shown values by number, called ``name`` there; ``shell_name``
    tells the shell's own names in ``namespace`` (``_``, ``_3``, ``Out``, ``In``).
    """

    namespace: dict[str, Any]
    outputs: dict[Any, Any]
    name: str
    shell_name: Callable[[str], bool]


#: :func:`user_holders` starts from its caller's frame
CALLER: Any = object()


def user_holders(wanted: set[int], history: OutputHistory | None = None, *,
                 frame: types.FrameType | None = CALLER,
                 namespace: dict[str, Any] | None = None) -> dict[int, Holder]:
    """For the arrays whose ids are in ``wanted``: the user's variable that holds
    each (a local of a frame of the user's code, from ``frame`` outwards, a
    global of its module; inside lists, dicts and other pytrees, and one
    attribute deep in an object), innermost frame first; then, with ``history``,
    the globals it names and the entries of its output history; then the
    globals ``namespace`` (a script's ``__main__`` once it has ended).
    ``frame=None`` looks at no frame."""
    walk = _Walk(wanted)
    found = walk.found
    modules: set[int] = set()  # the globals read already (a module's, once)
    start = sys._getframe(1) if frame is CALLER else frame
    for here in sites.user_frames(start, limit=None):
        if len(found) >= len(wanted):
            break
        code = here.f_code
        path = code.co_filename
        scope = "module" if code.co_name == "<module>" else code.co_name
        where = (path, scope, code.co_firstlineno, here.f_lineno)
        # A module's frame: its locals are its namespace (no snapshot to leave behind).
        namespace = here.f_locals if scope == "module" else None
        if namespace is None or id(namespace) not in modules:
            for name, value in _own(_python.frame_locals(here), namespace, history):
                walk.name(value, Holder(name, *where))
        if namespace is None and id(here.f_globals) not in modules:
            for name, value in _own(list(here.f_globals.items()), here.f_globals,
                                    history):
                walk.name(value, Holder(name, path, "module", 0, 0))
        modules.add(id(here.f_globals))
        if namespace is not None:
            modules.add(id(namespace))
    if history is not None and len(found) < len(wanted):
        if id(history.namespace) not in modules:  # the program's globals, seen from no frame
            for name, value in _own(list(history.namespace.items()), history.namespace,
                                    history):
                walk.name(value, Holder(name, "", "module", 0, 0))
        _history_holders(history, walk)
    if namespace is not None and len(found) < len(wanted) and id(namespace) not in modules:
        path = str(namespace.get("__file__") or "")
        for name, value in _own(list(namespace.items()), namespace, history):
            walk.name(value, Holder(name, path, "module", 0, 0))
    return found


def _own(items: list[tuple[str, Any]], namespace: Any, history: OutputHistory | None
         ) -> list[tuple[str, Any]]:
    """``items`` of ``namespace`` less an interactive shell's own names in it."""
    if history is None or namespace is not history.namespace:
        return items
    return [(name, value) for name, value in items if not history.shell_name(name)]


def _history_holders(history: OutputHistory, walk: _Walk) -> None:
    """Name the arrays that entries of the output history hold (``Out[3]``), each
    with the shell's other names for it (``_3``, ``_``)."""
    others: dict[int, list[str]] = {}
    for name, value in list(history.namespace.items()):
        if value is not history.outputs and history.shell_name(name):
            others.setdefault(id(value), []).append(name)
    for number, value in list(history.outputs.items()):
        if len(walk.found) >= len(walk.wanted):
            return
        aliases = sorted(others.get(id(value), ()), key=lambda n: (not n[1:].isdigit(), n))
        walk.name(value, Holder(f"{history.name}[{number}]", "", OUTPUT_HISTORY, 0, 0,
                                tuple(aliases)))


#: How deep :meth:`_Walk.name` looks into the user's objects' attributes (a
#: framework's state nests one object per level) ...
MAX_HOLDER_DEPTH = 12
#: ... and into containers (a model's nested dicts of layers: an optimizer state's
#: ``nu['layers'][1]['mlp']['layers'][0]['kernel'].value``)
MAX_HOLDER_NESTING = 24
#: Attributes looked at in one object
MAX_ATTRIBUTES = 256


class _Walk:
    """One naming of holders: the wanted ids, what was found, the values left to
    look at (:data:`MAX_HOLDER_LEAVES`), and the containers and objects walked
    already.

    Each is walked once, by the first path that reaches it (which names what
    it holds, as a later path would not): the user's objects point at each
    other (an ``argparse`` parser's groups and actions do, at every level),
    and walked along every path they cost millions of visits per sample
    (docs/performance.md)."""

    def __init__(self, wanted: set[int]) -> None:
        self.wanted = wanted
        self.found: dict[int, Holder] = {}
        self.budget = MAX_HOLDER_LEAVES
        self._seen: set[int] = set()

    def name(self, value: Any, holder: Holder, depth: int = 0, nesting: int = 0) -> None:
        """Name ``holder`` for the wanted arrays ``value`` holds: in lists, tuples
        (named ones too), dicts and sets, and in the attributes of the user's
        objects (their ``__dict__``, a few levels deep; the first level named, as
        ``state.params``). Runs no code of the program's: no pytree flattening
        (a framework's flatten can change what it caches: Flax NNX's graphs),
        no property, no ``__getattr__``, no overridden container method."""
        if isinstance(value, jax.Array):
            if id(value) in self.wanted:
                self.found.setdefault(id(value), holder)
            return
        if (self.budget <= 0 or depth > MAX_HOLDER_DEPTH or nesting > MAX_HOLDER_NESTING
                or isinstance(value, _NOT_WALKED)):
            return
        if id(value) in self._seen:
            return
        self._seen.add(id(value))
        if isinstance(value, dict):
            items = list(dict.values(value))
        elif isinstance(value, list):
            items = list(list.__iter__(value))
        elif isinstance(value, tuple):
            items = list(tuple.__iter__(value))
        elif isinstance(value, (set, frozenset)):
            items = list(frozenset.__iter__(value) if isinstance(value, frozenset)
                         else set.__iter__(value))
        elif type(value).__module__.partition(".")[0] == "memscope":
            return  # memscope's own objects (a jit stand-in): what they hold is not the user's
        else:
            self._attributes(value, holder, depth, nesting)
            return
        if len(items) > self.budget:
            return  # a long list of plain values (a dataset of floats): not walked
        self.budget -= len(items)
        for item in items:
            self.name(item, holder, depth, nesting + 1)

    def _attributes(self, value: Any, holder: Holder, depth: int, nesting: int) -> None:
        try:
            attrs = object.__getattribute__(value, "__dict__")
        except AttributeError:  # none: its slots only
            attrs = {}
        if not isinstance(attrs, dict):
            return
        named = [*dict.items(attrs), *_slot_values(value)][:MAX_ATTRIBUTES]
        self.budget -= 1 + len(named)
        for name, attr in named:
            # the top level's own attributes named (``state.params``), not its private ones
            inner = (Holder(f"{holder.name}.{name}", *holder[1:])
                     if depth == nesting == 0 and not name.startswith("_") else holder)
            self.name(attr, inner, depth + 1, nesting + 1)


_NOT_WALKED = (str, bytes, int, float, complex, types.ModuleType, types.FunctionType, type,
               np.ndarray)


def _slot_values(value: Any) -> list[tuple[str, Any]]:
    """The values in ``value``'s ``__slots__`` (a Flax NNX Variable's
    ``_raw_value``), read through the slots' own descriptors (no code of the
    program's: a property of the same name is not called)."""
    found = []
    for name, slot, cls in _slots(type(value)):
        with contextlib.suppress(AttributeError):  # an empty slot
            found.append((name, slot.__get__(value, cls)))
    return found


def _slots(kind: type) -> tuple[tuple[str, Any, type], ...]:
    """The slots of the class ``kind`` and its bases (a slot is a member
    descriptor of its class), kept while the class lives (weakly: a class of
    the program's may hold arrays)."""
    try:
        return _SLOTS[kind]
    except (KeyError, TypeError):
        pass
    found = tuple((name, slot, cls) for cls in kind.__mro__ for name, slot in vars(cls).items()
                  if isinstance(slot, types.MemberDescriptorType))
    with contextlib.suppress(TypeError):  # a class that takes no weak reference
        _SLOTS[kind] = found
    return found


_SLOTS: weakref.WeakKeyDictionary[type, tuple[tuple[str, Any, type], ...]] = (
    weakref.WeakKeyDictionary())


def main_globals() -> dict[str, Any] | None:
    """The ``__main__`` module's globals (the program's, as it left them)."""
    main = sys.modules.get("__main__")
    return getattr(main, "__dict__", None)
