"""What makes two jitted calls the same program, as JAX itself decides it.

JAX caches its executables per function object (its code, what it closes over,
a ``functools.partial``'s arguments), per static argument (by ``==`` and
``hash``), and per abstract value of each dynamic leaf (shape, canonical dtype,
weak type, sharding). memscope keys its entries on the same things, so two
programs are never merged into one entry and one executable is never split in
two. Nothing here keeps the user's objects alive: objects are held by weak
reference, or by value when they are plain immutable values.
"""

from __future__ import annotations

import enum
import functools
import re
import types
import weakref
from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from typing import Any

import jax
import numpy as np

from memscope import _compat

#: Values compared by value inside keys: immutable, and cheap to keep.
_PLAIN = (int, float, complex, str, bytes, bool, type(None), enum.Enum, types.CodeType)
#: Longest name shown for one static argument.
MAX_STATIC_NAME = 80


@dataclass(frozen=True)
class JitSpec:
    """The options of one ``jax.jit`` object that decide what it compiles."""

    static_argnums: tuple[int, ...]
    static_argnames: tuple[str, ...]
    donate_argnums: tuple[int, ...]
    donate_argnames: tuple[str, ...]
    #: hashable stand-in for every option, to merge jit objects made alike
    token: Any

    @property
    def donates(self) -> bool:
        """The jit donates some argument (by position or by name)."""
        return bool(self.donate_argnums or self.donate_argnames)


def jit_spec(jitted: Any) -> JitSpec:
    """The options JAX resolved when the jit object was made
    (:func:`memscope._compat.hooks.jit_options`)."""
    info = _compat.hooks.jit_options(jitted)
    # PjitInfo compares by identity; its fields (less the function's own) say
    # what the jit does.
    options = tuple(value for name, value in info.items()
                    if name not in ("fun_sourceinfo", "fun_signature"))
    try:
        hash(options)
        token: Any = options
    except TypeError:
        token = id(jitted)
    return JitSpec(
        static_argnums=tuple(info["static_argnums"]),
        static_argnames=tuple(info["static_argnames"]),
        donate_argnums=tuple(info["donate_argnums"]),
        donate_argnames=tuple(info["donate_argnames"]),
        token=token,
    )


class _Weak:
    """An object in a key, by identity, without keeping it alive.

    Once the object is gone, its key equals nothing: a new object born at the
    same address is another program.
    """

    __slots__ = ("__weakref__", "_hash", "_ref")

    def __init__(self, value: Any) -> None:
        self._ref = weakref.ref(value)
        self._hash = id(value)

    def __hash__(self) -> int:
        return self._hash

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, _Weak):
            return NotImplemented
        value = self._ref()
        return value is not None and value is other._ref()


class _Unique:
    """An object that can be neither kept nor watched: equal only to itself."""

    __slots__ = ()


def value_key(value: Any) -> Hashable:
    """``value`` by value when it is plain and immutable, else by (weak) identity."""
    if isinstance(value, _PLAIN):
        return (type(value), value)
    if type(value) in (tuple, frozenset):
        return (type(value), tuple(value_key(v) for v in value))
    try:
        return _Weak(value)
    except TypeError:  # not weakly referenceable (a list, a dict): never merged
        return _Unique()


def function_key(fun: Any) -> Hashable:
    """The program a function stands for: its code, closure, defaults and partial
    arguments (``make(k)``'s closures with different ``k`` are different programs)."""
    if isinstance(fun, functools.partial):
        return ("partial", function_key(fun.func), value_key(fun.args),
                tuple(sorted((k, value_key(v)) for k, v in fun.keywords.items())))
    if isinstance(fun, types.MethodType):
        return ("method", function_key(fun.__func__), value_key(fun.__self__))
    if isinstance(fun, types.FunctionType):
        cells = []
        for cell in fun.__closure__ or ():
            try:
                cells.append(value_key(cell.cell_contents))
            except ValueError:  # an empty cell
                cells.append(None)
        return ("function", fun.__code__, value_key(fun.__defaults__),
                value_key(tuple(sorted((fun.__kwdefaults__ or {}).items()))),
                tuple(cells))
    return ("object", value_key(fun))


class StaticKey:
    """A static argument in a key: equal as JAX compares static arguments
    (``==`` and ``hash``), held weakly where the object allows it."""

    __slots__ = ("_hash", "_ref", "_value")

    def __init__(self, value: Any) -> None:
        self._hash = hash(value)
        self._value: Any = None
        self._ref: weakref.ref[Any] | None = None
        try:
            self._ref = weakref.ref(value)
        except TypeError:  # ints, strings, tuples: small, and compared by value
            self._value = value

    def _get(self) -> tuple[bool, Any]:
        if self._ref is None:
            return True, self._value
        value = self._ref()
        return value is not None, value

    def name(self) -> str:
        """The argument's :func:`static_name` (``<gone>`` once it was freed)."""
        alive, value = self._get()
        return static_name(value) if alive else "<gone>"

    def __hash__(self) -> int:
        return self._hash

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, StaticKey) or self._hash != other._hash:
            return False
        alive, mine = self._get()
        other_alive, theirs = other._get()
        if not (alive and other_alive):
            return False
        try:
            return mine is theirs or bool(mine == theirs)
        except Exception:
            return False


class TreeKey:
    """The call's tree structure in a key, compared as JAX compares it, except
    that a comparison that raises is unequal. Node data of a framework's own
    can compare forever (Flax NNX's graph of a module that holds itself: a
    ``RecursionError``); JAX compares a call's structure only with its own jit
    object's earlier calls, while memscope's session holds every function's."""

    __slots__ = ("_hash", "treedef")

    def __init__(self, treedef: Any) -> None:
        self.treedef = treedef
        self._hash = hash(treedef)

    def __hash__(self) -> int:
        return self._hash

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, TreeKey) or self._hash != other._hash:
            return False
        try:
            return self.treedef is other.treedef or bool(self.treedef == other.treedef)
        except Exception:  # RecursionError among them
            return False


_ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+|0x[0-9a-fA-F]{6,}")


def static_name(value: Any) -> str:
    """A stable name for a static argument, the same in every run: its ``repr``
    without memory addresses (``<Model>`` for ``<__main__.Model object at 0x7f..>``),
    or ``<TypeName>`` when ``repr`` raises; at most :data:`MAX_STATIC_NAME` characters."""
    kind = type(value)
    if kind.__repr__ is object.__repr__:
        return f"<{kind.__qualname__}>"
    try:
        text = repr(value)
    except Exception:  # the user's __repr__ must not break the user's call
        return f"<{kind.__qualname__}>"
    if not isinstance(text, str):
        return f"<{kind.__qualname__}>"
    text = _ADDRESS.sub("", text)
    if len(text) > MAX_STATIC_NAME:
        text = text[:MAX_STATIC_NAME - 1] + "…"
    return text


def leaf_key(x: Any) -> tuple[Any, ...]:
    """(kind, abstract value, placement): what JAX's dispatch distinguishes for one
    dynamic leaf. The abstract value carries the canonical dtype (a float64 numpy
    array is float32 with x64 off) and the weak type of Python scalars. A hijax
    value's is its type's name and description, and its arrays' keys."""
    if isinstance(x, jax.Array):
        return ("array", jax.typeof(x), _placement(x.sharding, x.ndim))
    if _compat.values.is_ref_aval(x):  # an ahead-of-time call's stand-in for a Ref
        return ("ref", x, None)
    if _compat.values.is_ref(x):  # a jax.Ref: JAX keys it by its aval and its buffer's sharding
        try:
            placement = _placement(x.sharding, len(x.shape))
        except Exception:  # a Ref built of several arrays
            placement = None
        return ("ref", jax.typeof(x), placement)
    if isinstance(x, np.ndarray | np.generic):
        return ("numpy", jax.typeof(x), None)
    hijax = _compat.values.hijax_value(x)
    if hijax is not None:  # JAX keys it by its type (and state) and its arrays'
        return ("hijax", (hijax.name, hijax.described),
                tuple(leaf_key(a) for a in _compat.values.lo_values(x) or ()))
    if isinstance(x, jax.ShapeDtypeStruct):  # an ahead-of-time call's stand-in for an array
        sharding = x.sharding
        return ("array", jax.typeof(x),
                None if not isinstance(sharding, jax.sharding.Sharding)
                else _placement(sharding, len(x.shape)))
    try:
        return (type(x), jax.typeof(x), None)
    except Exception:  # not a JAX type: JAX will say so at the call
        return (type(x), None, None)


@functools.lru_cache(maxsize=4096)
def _placement(sharding: Any, ndim: int) -> Any:
    # Arrays share a handful of sharding objects; each is looked at once, not
    # at every call of every leaf.
    return _compat.values.sharding_key(sharding, ndim)


def leaf_text(key: tuple[Any, ...]) -> str:
    """``float32[4,8]`` for an array leaf (its canonical dtype), ``Ref{float32[4,8]}``
    for a ``jax.Ref``, ``Param{float32[4,8], float32[8]}`` for a hijax value (its
    type, then its arrays), the type's name for a Python scalar."""
    kind, aval, placement = key
    if kind in ("array", "numpy") and aval is not None:
        return f"{aval.dtype}[{','.join(map(str, aval.shape))}]"
    if kind == "hijax":  # Param{float32[4,8]}: the type, then its arrays
        return f"{aval[0]}{{{', '.join(leaf_text(k) for k in placement)}}}"
    if kind == "ref" and aval is not None:
        return f"Ref{{{aval.dtype}[{','.join(map(str, aval.shape))}]}}"
    return kind.__name__ if isinstance(kind, type) else str(kind)


def call_key(spec: JitSpec, args: tuple[Any, ...], kwargs: dict[str, Any]
             ) -> tuple[Any, list[Any]]:
    """What JAX keys this call's executable on, and the call's flat dynamic
    leaves; ``spec`` is the jit object's (its static arguments)."""
    positional: tuple[Any, ...] = ()
    named: tuple[Any, ...] = ()
    if spec.static_argnums or spec.static_argnames:
        n = len(args)
        positions = {i % n for i in spec.static_argnums if -n <= i < n}
        positional = tuple((i, StaticKey(args[i])) for i in sorted(positions))
        named = tuple(sorted((k, StaticKey(v)) for k, v in kwargs.items()
                             if k in spec.static_argnames))
        args = tuple(a for i, a in enumerate(args) if i not in positions)
        kwargs = {k: v for k, v in kwargs.items() if k not in spec.static_argnames}
    leaves, treedef = jax.tree_util.tree_flatten((args, kwargs))
    key = (positional, named, TreeKey(treedef), tuple(leaf_key(x) for x in leaves))
    hash(key)
    return key, leaves


def as_given(key: Any, leaves: Sequence[Any], args: tuple[Any, ...], kwargs: dict[str, Any]
             ) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """The call's ``(args, kwargs)`` as it was given, from its :func:`call_key` and
    flat dynamic ``leaves``: the call may have changed the containers it got (a
    Flax NNX module in graph mode), and JAX keyed its program on them as they
    were. Static arguments are the objects given."""
    positional, named, tree, _ = key
    dynamic_args, dynamic_kwargs = jax.tree_util.tree_unflatten(tree.treedef, leaves)
    if not positional and not named:
        return tuple(dynamic_args), dict(dynamic_kwargs)
    rebuilt = list(dynamic_args)
    for i, _ in positional:
        rebuilt.insert(i, args[i])
    return tuple(rebuilt), {**dynamic_kwargs, **{k: kwargs[k] for k, _ in named}}


def program_leaves(leaves: list[Any]) -> list[Any]:
    """The call's flat leaves as its compiled program takes them: a hijax value
    (a Flax hijax ``Variable``) is the arrays JAX lowers it to, in its place."""
    if not any(_compat.values.is_hijax(x) for x in leaves):
        return leaves
    expanded: list[Any] = []
    for x in leaves:
        arrays = _compat.values.lo_values(x)
        expanded.extend([x] if arrays is None else arrays)
    return expanded


def signature_text(key: Any) -> str:
    """``(float32[4,8], int, #1=3, lr=0.1)``: what distinguishes one signature, in
    names that are the same in every run (no memory addresses)."""
    positional, named, _, leaf_keys = key
    parts = [leaf_text(k) for k in leaf_keys]
    parts += [f"#{i}={static.name()}" for i, static in positional]
    parts += [f"{k}={static.name()}" for k, static in named]
    return f"({', '.join(parts)})"
