"""The ``jax.Ref`` s a jitted function can see without being given them: what it
closes over, the module globals it names, a bound method's object.

JAX passes such a Ref to the compiled program as an extra argument, updated in
place (``pxla._move_mutable_consts``); it knows the Ref but not the user's name
for it. So too a mutable hijax value (a Flax hijax ``Variable``, JAX 0.7 to
0.10), whose arrays JAX passes as arguments: it is found and named the same
way. Looked up at a signature's first call only, before the call: names and
``id`` s are kept, never the Refs.
"""

from __future__ import annotations

import functools
import itertools
import types
from collections.abc import Iterable, Iterator
from typing import Any

import jax

from memscope import _compat
from memscope.capturing.keys import JitSpec

#: How deep into dicts, lists, tuples and objects' attributes to look, and how
#: many values to look at in all (a first call's cost stays microseconds).
_DEPTH = 3
_WIDTH = 64
_BUDGET = 256


def visible_refs(fun: Any, static: Iterable[tuple[str, Any]] = ()
                 ) -> list[tuple[str, Any]]:
    """``(name, ref)`` for each Ref (or hijax value) ``fun`` can reach by name:
    its closure cells, the globals its code names, a bound method's ``self``, a
    partial's arguments (``state``, ``self.cache``, ``refs['a']``), then
    ``static``: named values the call passes that JAX does not trace (a
    wrapper's static arguments). The first name found wins."""
    found: dict[int, tuple[str, Any]] = {}
    seen: set[int] = set()
    try:
        for name, value in (*_roots(fun), *static):
            for path, ref in _walk((name,), value, _DEPTH, seen):
                found.setdefault(id(ref), (path, ref))
    except Exception:  # the user's objects must never fail the call
        return list(found.values())
    return list(found.values())


def _roots(fun: Any) -> Iterator[tuple[str, Any]]:
    while isinstance(fun, types.MethodType | functools.partial):
        if isinstance(fun, functools.partial):
            yield from ((f"args[{i}]", v) for i, v in enumerate(fun.args))
            yield from fun.keywords.items()
            fun = fun.func
        else:
            yield "self", fun.__self__
            fun = fun.__func__
    fun = getattr(fun, "__wrapped__", fun)
    code = getattr(fun, "__code__", None)
    if code is None:
        return
    for name, cell in zip(code.co_freevars, getattr(fun, "__closure__", None) or (),
                          strict=False):
        try:
            yield name, cell.cell_contents
        except ValueError:  # an empty cell
            continue
    module_globals = getattr(fun, "__globals__", {})
    for name in code.co_names:
        if name in module_globals:
            yield name, module_globals[name]


#: Values that hold no Ref and need no look inside.
_OPAQUE = (int, float, complex, str, bytes, bool, type(None), type, types.ModuleType,
           types.FunctionType, types.BuiltinFunctionType)


def _walk(path: tuple[Any, ...], value: Any, depth: int, seen: set[int]
          ) -> Iterator[tuple[str, Any]]:
    # Every value visited counts against the budget; a path is spelled only
    # for a Ref found (a key's repr is the user's code).
    if len(seen) >= _BUDGET or id(value) in seen:
        return
    seen.add(id(value))
    if isinstance(value, (*_OPAQUE, jax.Array)):
        return
    if _compat.values.is_ref(value) or _compat.values.is_hijax(value):
        yield _spelled(path), value
        return
    if depth == 0:
        return
    if isinstance(value, dict):
        for k, v in itertools.islice(value.items(), _WIDTH):
            yield from _walk((*path, ("[]", k)), v, depth - 1, seen)
    elif isinstance(value, list | tuple):
        for i, v in enumerate(value[:_WIDTH]):
            yield from _walk((*path, ("[i]", i)), v, depth - 1, seen)
    else:
        attributes = getattr(value, "__dict__", None)
        if isinstance(attributes, dict):
            for k, v in itertools.islice(attributes.items(), _WIDTH):
                if isinstance(k, str) and not k.startswith("__"):
                    yield from _walk((*path, (".", k)), v, depth - 1, seen)


def _spelled(path: tuple[Any, ...]) -> str:
    name, *steps = path
    text = str(name)
    for kind, key in steps:
        text += (f".{key}" if kind == "." else f"[{key}]" if kind == "[i]"
                 else f"[{key!r}]")
    return text


def static_refs(spec: JitSpec, args: tuple[Any, ...], kwargs: dict[str, Any],
                framework: Any) -> list[tuple[str, Any]]:
    """The Refs a call passes where JAX does not trace them, so that it closes
    over them: its static arguments, or, under a framework's wrapper (Equinox
    passes the user's non-array arguments in one static argument), any
    argument. For their addresses only: JAX's flat names would not be the user's."""
    if framework is not None:
        roots = [*(("", a) for a in args), *kwargs.items()]
    else:
        n = len(args)
        roots = [("", args[i % n]) for i in spec.static_argnums if -n <= i < n]
        roots += [(k, v) for k, v in kwargs.items() if k in spec.static_argnames]
    return visible_refs(None, roots) if roots else []
