"""Every private attribute of the JAX frameworks memscope understands, in one place.

Equinox's ``filter_jit`` and Flax's ``nnx.jit`` call ``jax.jit`` on a function
of their own, with arguments of their own. This module recognizes those
functions and reads back what the wrapper hid: the user's function, the user's
arguments and the wrapper's donation setting. It never imports a framework:
it looks in ``sys.modules`` for what the user's program already imported, so
memscope runs without the frameworks installed. Each function says which
framework internals it relies on, so a framework upgrade is a review of this
file (checked against equinox 0.13 and flax 0.12.0 to 0.12.8; the hijax
Variable's paths also against flax 0.12.12).
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import FrameType
from typing import Any, Literal

Framework = Literal["equinox", "nnx"]

_EQX_JIT = "equinox._jit"
_NNX_COMPILATION = "flax.nnx.transforms.compilation"
#: Flax's graph module: ``flax.nnx.graphlib`` in later 0.12 releases (with
#: ``flax.nnx.graph`` re-exporting it); flax 0.12.0 (the Flax that resolves
#: with JAX 0.7) has only ``flax.nnx.graph``.
_NNX_GRAPHS = ("flax.nnx.graphlib", "flax.nnx.graph")
_NNX_EXTRACT = "flax.nnx.extract"
#: How far up the stack the wrapper's own frame may be from memscope's hook.
_MAX_FRAMES = 16


def framework(fun: Any) -> Framework | None:
    """The framework whose jit wrapper made ``fun``, the function JAX is asked to jit.

    Equinox jits one ``fun_wrapped`` closure per user function (in
    ``equinox._jit._filter_jit_cache``) and renames it after the user's
    function; NNX jits a ``JitFn`` object that holds the user's function.
    """
    code = getattr(fun, "__code__", None)
    if (getattr(fun, "__module__", None) == _EQX_JIT and code is not None
            and code.co_name == "fun_wrapped"):
        return "equinox"
    kind = type(fun)
    if kind.__module__ == _NNX_COMPILATION and kind.__qualname__ == "JitFn":
        return "nnx"
    return None


#: Where each framework's jit wrapper keeps the ``jax.jit`` object it calls, and
#: what made it: Equinox's ``_JitWrapper._cached`` (a field of the frozen
#: module), NNX's ``JitWrapped.jitted_fn`` (``SimpleJitWrapped`` in tree mode).
_INNER_JIT = {(_EQX_JIT, "_JitWrapper"): ("_cached", "eqx.filter_jit"),
              (_NNX_COMPILATION, "JitWrapped"): ("jitted_fn", "nnx.jit"),
              (_NNX_COMPILATION, "SimpleJitWrapped"): ("jitted_fn", "nnx.jit")}


def inner_jit(wrapper: Any) -> tuple[str, str] | None:
    """``(attribute, maker)``: the attribute of ``wrapper`` (what ``eqx.filter_jit``
    or ``nnx.jit`` returned) that holds the ``jax.jit`` object it calls, and the
    wrapper's name; ``None`` for anything else, or a wrapper this version of
    memscope does not know."""
    kind = type(wrapper)
    found = _INNER_JIT.get((kind.__module__, kind.__qualname__))
    if found is None or not hasattr(wrapper, found[0]):
        return None
    return found


@contextlib.contextmanager
def calling(wrapper: Any, attribute: str, stand_in: Any) -> Any:
    """Within the block, ``wrapper`` calls ``stand_in`` in place of its ``jax.jit``
    object (set past Equinox's frozen-module ``__setattr__``); restored after."""
    original = getattr(wrapper, attribute)
    object.__setattr__(wrapper, attribute, stand_in)
    try:
        yield
    finally:
        object.__setattr__(wrapper, attribute, original)


# ----------------------------------------------------------------- Equinox --


@dataclass(frozen=True)
class EquinoxPart:
    """One of the pytrees ``filter_jit`` splits a call into, as the user passed it.

    ``name`` is ``"first"`` (the first argument), ``"fun"`` (the function's own
    arrays) or ``"rest"`` (``(other positional arguments, keyword arguments)``);
    ``dynamic`` says, per leaf of ``value``, whether it is traced (an array).
    """

    name: str
    value: Any
    dynamic: tuple[bool, ...]
    donated: bool


@dataclass(frozen=True)
class EquinoxCall:
    """One call of an ``eqx.filter_jit`` function, read back from ``fun_wrapped``'s
    arguments; ``parts`` come in JAX's flat order of the dynamic leaves."""

    function: Any
    first: Any
    rest: tuple[Any, ...]
    kwargs: dict[str, Any]
    parts: tuple[EquinoxPart, ...]
    #: the user's setting silences "not usable" (``"all"``); ``None`` if unknown
    silenced: bool | None


def equinox_call(args: Sequence[Any], kwargs: Mapping[str, Any]) -> EquinoxCall | None:
    """Undo ``equinox._jit._preprocess`` for ``fun_wrapped(dynamic_donate,
    dynamic_nodonate, static)``; ``None`` when the call does not have that shape.

    Equinox flattens ``fun``, the first argument and ``(rest, kwargs)`` with
    ``jtu.tree_flatten`` and keeps each as a tuple of array-or-``None`` leaves
    (dynamic) beside ``(non-array leaves, treedef)`` (static). Each dict of
    dynamic parts is keyed ``"fun"``, ``"first"``, ``"rest"``; JAX flattens the
    dicts in sorted key order, the donated dict first.
    """
    import jax

    if kwargs or len(args) != 3:
        return None
    donate, nodonate, static = args
    if not (isinstance(donate, dict) and isinstance(nodonate, dict)):
        return None
    static_fun, static_first, static_rest = static
    statics = {"fun": static_fun, "first": static_first, "rest": static_rest}
    values: dict[str, Any] = {}
    parts = []
    for donated, group in ((True, donate), (False, nodonate)):
        for name in sorted(group):
            dynamic = group[name]
            static_leaves, treedef = statics[name]
            leaves = [d if s is None else s
                      for d, s in zip(dynamic, static_leaves, strict=True)]
            values[name] = jax.tree_util.tree_unflatten(treedef, leaves)
            parts.append(EquinoxPart(name, values[name],
                                     tuple(d is not None for d in dynamic), donated))
    rest_args, rest_kwargs = values["rest"]
    *rest, dummy = rest_args  # Equinox appends a None so that no call has zero arguments
    if dummy is not None:
        return None
    return EquinoxCall(function=values["fun"], first=values["first"], rest=tuple(rest),
                       kwargs=dict(rest_kwargs), parts=tuple(parts),
                       silenced=_equinox_silences())


def _equinox_silences() -> bool | None:
    # ``filter_warning`` (``donate="all"`` or ``"all-except-first"``) lives only
    # on the ``_JitWrapper``, which ``equinox._jit._call`` holds as a local while
    # it calls the jitted function: the caller of memscope's hook.
    module = sys.modules.get(_EQX_JIT)
    target = getattr(getattr(module, "_call", None), "__code__", None)
    frame: FrameType | None = sys._getframe(1)
    for _ in range(_MAX_FRAMES):
        if frame is None or target is None:
            return None
        if frame.f_code is target:
            wrapper = frame.f_locals.get("jit_wrapper")
            value = getattr(wrapper, "filter_warning", None)
            return value if isinstance(value, bool) else None
        frame = frame.f_back
    return None


# --------------------------------------------------------------------- NNX --


def is_nnx_node_states(x: Any) -> bool:
    """True for the pytree ``nnx.jit`` passes to JAX in place of a graph node
    (``flax.nnx.extract.NodeStates``: a graphdef and its flat states)."""
    module = sys.modules.get(_NNX_EXTRACT)
    kind = getattr(module, "NodeStates", None)
    return kind is not None and isinstance(x, kind)


def nnx_state_paths(tree: Any) -> list[list[tuple[str, tuple[type, ...]]] | None]:
    """Per ``NodeStates`` in ``tree`` (in ``jax.tree.leaves`` order), the user's
    path of each of its flat leaves (``.layers[0].kernel``) with the types
    holding it (its node's, its ``Variable``'s: for :func:`type_role`);
    ``None`` where unknown.

    ``nnx.jit`` splits all graph nodes of a call in one split context, so a
    node shared by two arguments is flattened once. Rebuilding the nodes with
    one shared index and flattening them again with one shared ref index (the
    ``nnx.graph.unflatten``/``flatten`` arguments made for that) gives the
    leaves in the order JAX sees them, this time with their paths.
    """
    import jax

    graph = next((sys.modules[name] for name in _NNX_GRAPHS if name in sys.modules), None)
    if graph is None:
        return []
    found = [x for x in jax.tree_util.tree_leaves(tree, is_leaf=is_nnx_node_states)
             if is_nnx_node_states(x)]
    index_ref = graph.IndexMap()
    ref_index = graph.RefMap()
    result: list[list[tuple[str, tuple[type, ...]]] | None] = []
    for states in found:
        try:
            if len(states.states) != 1 or not isinstance(states.states[0], list):
                # split by filters (StateSharding): the states carry their paths
                result.append([(_path_text(None, path), _variable_kinds(v))
                               for s in states.states for path, v in s])
                continue
            node = graph.unflatten(states.graphdef, states.states[0], index_ref=index_ref)
            _, flat = graph.flatten(node, with_paths=True, ref_index=ref_index)
            result.append([(_path_text(node, path), (type(node), *_variable_kinds(v)))
                           for path, v in flat])
        except Exception:  # a graph this version of memscope does not know
            result.append(None)
    return result


def _variable_kinds(value: Any) -> tuple[type, ...]:
    """The type of a flat state's leaf: a ``Variable``'s own, or the type a
    ``VariableState`` says it holds (its ``type``; a ``Variable``'s own
    ``.type`` is deprecated in Flax 0.12.0 and warns: never read)."""
    kind = type(value)
    if kind.__name__ != "VariableState":
        return (kind,)
    held = getattr(value, "type", None)
    return (kind,) + ((held,) if isinstance(held, type) else ())


def _path_text(node: Any, path: Sequence[Any]) -> str:
    """``('layers', 0, 'kernel')`` as Python would reach it from ``node``:
    ``.layers[0].kernel``, with ``['key']`` where the step is a mapping's key."""
    text = ""
    for part in path:
        if isinstance(node, Mapping) or not (isinstance(part, str) and part.isidentifier()):
            text += f"[{part!r}]"
            node = _step(node, part, item=True)
        else:
            text += f".{part}"
            node = _step(node, part, item=False)
    return text


def _step(node: Any, part: Any, *, item: bool) -> Any:
    if node is None:
        return None
    try:
        return node[part] if item else getattr(node, part)
    except Exception:
        return None


#: Flax's module of ``Variable``: its hijax ``Variable`` is a hijax type, described
#: to JAX by an ``AbstractVariable`` and, when mutable (Flax 0.12.x on JAX 0.7 to
#: 0.10), its state by a ``VariableQDD``.
_NNX_VARIABLES = "flax.nnx.variablelib"


def hijax_paths(described: Any, count: int) -> list[str] | None:
    """The path of each of the ``count`` arrays of a Flax hijax ``Variable``
    within it, as JAX names the leaves of a plain ``Variable`` (``.value``,
    ``.value['a']``); ``None`` for another hijax type, or where unknown.

    ``described`` is JAX's description of the value (:class:`memscope._compat.values.HighValue`):
    a ``VariableQDD`` (``treedef``) or an ``AbstractVariable`` (``_treedef``), each
    holding the treedef of the Variable's pytree, a node over its value alone.
    """
    import jax

    kind = type(described)
    if kind.__module__ != _NNX_VARIABLES:
        return None
    attribute = "treedef" if kind.__name__ == "VariableQDD" else "_treedef"
    treedef: Any = getattr(described, attribute, None)
    try:
        (value_def,) = treedef.children()
        if value_def.num_leaves != count:  # a leaf that is itself several arrays
            return None
        value = jax.tree_util.tree_unflatten(value_def, range(count))
        flat, _ = jax.tree_util.tree_flatten_with_path(value)
    except Exception:  # a Variable this version of memscope does not know
        return None
    return [".value" + jax.tree_util.keystr(path) for path, _ in flat]


def retrace_context(fun: Any) -> Any:
    """What tracing ``fun`` (a function a wrapper jitted) again needs around it.

    ``nnx.jit`` jits a ``JitFn`` that reads the graph nodes of its call from the
    update context ``nnx.jit``'s own call opens (``update_context(ctxtag)``);
    traced again outside that call it finds none. Other functions need nothing.
    """
    graph = next((sys.modules[name] for name in _NNX_GRAPHS if name in sys.modules), None)
    if (graph is not None and type(fun).__name__ == "JitFn"
            and type(fun).__module__ == _NNX_COMPILATION and hasattr(fun, "ctxtag")):
        return graph.update_context(fun.ctxtag)
    return contextlib.nullcontext()


#: The frameworks whose differentiation wrappers :func:`differentiation_api` reads.
DIFFERENTIATING = ("equinox", "flax")


def differentiation_api(package: str, frame: Any) -> tuple[str | None, Any]:
    """The wrapper's name (``eqx.filter_grad``) and the function it differentiates,
    where ``frame`` (of a module of ``package``, one of :data:`DIFFERENTIATING`)
    is the wrapper's own; else ``(None, None)``.

    Equinox's ``filter_grad`` and ``filter_value_and_grad`` are ``_GradWrapper``
    and ``_ValueAndGradWrapper`` objects holding the function as ``_fun``, seen
    as the ``self`` of their ``__call__``; Flax's ``nnx.grad`` and
    ``nnx.value_and_grad`` differentiate in ``grad_wrapper`` (or
    ``tree_grad_wrapper``), whose locals hold the JAX ``transform`` and the
    function ``f``.
    """
    local = frame.f_locals
    if package == "equinox":
        owner = local.get("self")
        kind = type(owner).__name__
        if "Grad" not in kind:
            return None, None
        api = "eqx.filter_value_and_grad" if "ValueAndGrad" in kind else "eqx.filter_grad"
        return api, getattr(owner, "_fun", None)
    transform = local.get("transform")
    if frame.f_code.co_name not in ("grad_wrapper", "tree_grad_wrapper") or transform is None:
        return None, None
    import jax

    api = "nnx.value_and_grad" if transform is jax.value_and_grad else "nnx.grad"
    return api, local.get("f")

# ------------------------------------------------------------------- roles --

#: Flax NNX's Variable types by what they hold (``flax.nnx.variablelib``, and
#: ``flax.nnx.training.optimizer``'s ``OptState``/``OptArray``/``OptVariable``).
_NNX_OPTIMIZER = frozenset({"OptState", "OptArray", "OptVariable", "Optimizer"})
_NNX_MODEL_STATE = frozenset({"BatchStat", "Cache", "RngState", "RngKey", "RngCount",
                              "Intermediate", "Perturbation"})


def type_role(kinds: Sequence[type]) -> str | None:
    """The role the framework's own types say a leaf has, from the types
    between the call's arguments and the leaf (outermost first), or ``None``:

    * a Flax NNX ``Variable`` says it first: ``Param`` is ``parameters``, the
      optimizer's variables (``OptState``, ``OptArray``, ``OptVariable``)
      ``optimizer``, batch statistics, caches and RNG state ``model_state``;
    * then an optax state anywhere (Adam's ``mu`` holds a copy of the model's
      structure, Equinox modules included), or an ``nnx.Optimizer``: ``optimizer``;
    * then Equinox: its ``nn.State`` is ``model_state``, a module ``parameters``.
    """
    flax = [getattr(k, "__name__", "") for k in kinds
            if (getattr(k, "__module__", "") or "").startswith("flax")]
    for name in reversed(flax):
        if name == "Param":
            return "parameters"
        if name in _NNX_OPTIMIZER and name != "Optimizer":
            return "optimizer"
        if name in _NNX_MODEL_STATE:
            return "model_state"
    if "Optimizer" in flax or any((getattr(k, "__module__", "") or "").startswith("optax")
                                  for k in kinds):
        return "optimizer"
    for kind in reversed(kinds):
        module = getattr(kind, "__module__", "") or ""
        if module.startswith("equinox") and getattr(kind, "__name__", "") in ("State",
                                                                               "StateIndex"):
            return "model_state"
    if any(_is_equinox_module(k) for k in kinds):
        return "parameters"
    return None


def _is_equinox_module(kind: type) -> bool:
    return any(getattr(c, "__module__", "").startswith("equinox") and c.__name__ == "Module"
               for c in getattr(kind, "__mro__", ()))


def leaf_type_roles(tree: Any) -> tuple[str | None, ...]:
    """:func:`type_role` of each leaf of ``tree`` (a call's arguments, in
    shapes: ``Traced.args_info``), in ``jax.tree_util.tree_leaves`` order,
    read from its treedef's node types (no array is kept or read)."""
    import jax

    roles: list[str | None] = []
    stack: list[tuple[Any, tuple[type, ...]]] = [(jax.tree_util.tree_structure(tree), ())]
    while stack:
        treedef, kinds = stack.pop()
        if treedef.num_leaves == 1 and treedef.num_nodes == 1:
            roles.append(type_role(kinds))
            continue
        kind, _ = treedef.node_data()
        stack.extend((child, (*kinds, kind)) for child in reversed(treedef.children()))
    return tuple(roles)
