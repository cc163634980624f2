"""Framework jit wrappers, seen the way their users wrote them.

``eqx.filter_jit`` and ``nnx.jit`` hand ``jax.jit`` a function and arguments of
their own. For one call, :func:`describe` maps what JAX sees back to the user:
the user's function, one :class:`~memscope.variants.donation.Argument` per argument the
user passed (each holding its flat leaves in JAX's order), every flat input and
output named by the user's argument names and module fields
(``model.layers[0].weight``, ``opt_state[0].mu['w']``), and the wrapper's own
spelling of donation. What the frameworks keep privately is read in
:mod:`memscope._frameworks`; this module only walks pytrees.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

import jax
import numpy as np

from memscope import _frameworks
from memscope._frameworks import Framework
from memscope.compiled.program import WRITTEN_BACK
from memscope.variants.donation import Argument, FilterJit, NnxJit, Spelling, Style

if TYPE_CHECKING:
    from memscope.compiled.read import CompiledFacts

#: Equinox's own output that says the call has finished (``filter_jit``'s marker).
EQX_MARKER = "filter_jit marker"

framework = _frameworks.framework


@dataclass(frozen=True)
class Wrapped:
    """One call of a wrapper-jitted function, in the user's terms.

    ``arguments`` are ``None`` where JAX's own top-level arguments are the
    user's (``nnx.jit`` keeps them); ``input_names``/``output_names`` name the
    flat leaves, ``None`` where they could not be recovered (JAX's names are
    kept then). ``donated_positions``/``donated_names`` say what the user's
    setting donates, as ``jax.jit``'s resolved ``donate_argnums``/``argnames``
    would; ``None`` keeps JAX's.
    """

    framework: Framework
    function: Any
    style: Spelling
    arguments: tuple[Argument, ...] | None
    input_names: tuple[str, ...] | None
    output_names: tuple[str, ...] | None
    parameters: tuple[str, ...] | None
    signature: str | None = None
    donated_positions: tuple[int, ...] | None = None
    donated_names: tuple[str, ...] | None = None
    #: per flat input leaf: the role its framework's types say
    #: (:func:`memscope._frameworks.type_role`); ``None`` where not read
    input_roles: tuple[str | None, ...] | None = None


def describe(kind: Framework, fun: Any, args: tuple[Any, ...], kwargs: dict[str, Any],
             out: Any, *, style: Style, jax_arguments: Callable[[], Sequence[Argument]]
             ) -> Wrapped | None:
    """What the call ``fun(*args, **kwargs) -> out`` that ``kind``'s wrapper made
    means to the user; ``None`` where the call is not shaped as expected.

    ``style`` is how the wrapper's own donation keywords were spelled (NNX passes
    them to ``jax.jit``); ``jax_arguments`` gives JAX's top-level arguments.
    """
    try:
        if kind == "equinox":
            return _equinox(args, kwargs)
        return _nnx(fun, args, kwargs, out, style, jax_arguments())
    except Exception:  # a framework version memscope does not know: JAX's view
        return None


# ----------------------------------------------------------------- Equinox --


def _equinox(args: tuple[Any, ...], kwargs: dict[str, Any]) -> Wrapped | None:
    call = _frameworks.equinox_call(args, kwargs)
    if call is None:
        return None
    function = call.function
    names = _positional_names(function, 1 + len(call.rest))
    fun_name = getattr(function, "__name__", None) or type(function).__name__
    # user arguments: the first, the other positional ones, keywords, the function
    slots: list[tuple[int | None, str]] = [(i, names[i]) for i in range(1 + len(call.rest))]
    slots += [(None, k) for k in call.kwargs]
    fun_slot = len(slots)
    slots.append((None, fun_name))
    leaves: list[list[int]] = [[] for _ in slots]
    arrays = [False] * len(slots)
    input_names: list[str] = []
    input_roles: list[str | None] = []
    donated: set[int] = set()
    for part in call.parts:
        paths = [p for p, _ in jax.tree_util.tree_flatten_with_path(part.value)[0]]
        values = jax.tree_util.tree_leaves(part.value)
        if len(paths) != len(part.dynamic):
            return None
        kinds = _type_roles(part.value, len(values))
        for path, value, dynamic, role in zip(paths, values, part.dynamic, kinds, strict=True):
            slot, name = _equinox_leaf(part.name, path, slots, fun_slot)
            arrays[slot] = arrays[slot] or isinstance(value, jax.Array | np.ndarray)
            if dynamic:
                leaves[slot].append(len(input_names))
                input_names.append(name)
                input_roles.append(role)
                if part.donated:
                    donated.add(slot)
    arguments = tuple(
        Argument(position=position, name=name, by_name=position is None,
                 leaves=tuple(leaves[i]), has_arrays=arrays[i])
        for i, (position, name) in enumerate(slots))
    # Equinox donates by whole groups: the first argument, or all the others.
    return Wrapped(
        framework="equinox", function=function,
        # "none" silences nothing yet donates nothing: advise Equinox's plain "all".
        style=FilterJit(warn=call.silenced is False and any(p.donated for p in call.parts)),
        arguments=arguments, input_names=tuple(input_names), output_names=None,
        input_roles=tuple(input_roles),
        parameters=tuple(n for n in names[:1 + len(call.rest)]),
        signature=_equinox_signature(arguments, input_names, call, args),
        donated_positions=tuple(sorted(arguments[i].position  # type: ignore[misc]
                                       for i in donated
                                       if arguments[i].position is not None)),
        donated_names=tuple(arguments[i].name or "" for i in sorted(donated)
                            if arguments[i].position is None and i != fun_slot))


def _equinox_leaf(part: str, path: tuple[Any, ...], slots: Sequence[tuple[int | None, str]],
                  fun_slot: int) -> tuple[int, str]:
    """The user argument a leaf of one Equinox part belongs to, and its name."""
    if part == "first":
        return 0, slots[0][1] + jax.tree_util.keystr(path)
    if part == "fun":
        return fun_slot, slots[fun_slot][1] + jax.tree_util.keystr(path)
    group, key, *inner = path  # (rest_args, kwargs)[group][key]
    if _key(group) == 0:
        slot = 1 + int(_key(key))
    else:
        slot = next(i for i, (p, n) in enumerate(slots) if p is None and n == _key(key))
    return slot, slots[slot][1] + jax.tree_util.keystr(tuple(inner))


def _key(entry: Any) -> Any:
    for attr in ("idx", "key", "name"):
        if hasattr(entry, attr):
            return getattr(entry, attr)
    return entry


def _equinox_signature(arguments: Sequence[Argument], input_names: Sequence[str],
                       call: _frameworks.EquinoxCall, args: tuple[Any, ...]) -> str:
    """The dynamic leaves' avals, then the user's arguments that hold no array
    (static to Equinox) where they are plain values."""
    dynamic = [x for part_group in args[:2] for name in sorted(part_group)
               for x in part_group[name] if x is not None]
    parts = [f"{x.dtype}[{','.join(map(str, x.shape))}]" for x in dynamic]
    values = (call.first, *call.rest, *call.kwargs.values())
    for argument, value in zip(arguments, values, strict=False):
        if not argument.leaves and isinstance(value, bool | int | float | str | None):
            parts.append(f"{argument.name}={value!r}")
    return f"({', '.join(parts)})"


def equinox_output_name(path: str) -> str:
    """JAX's name for an output of ``fun_wrapped`` (``marker, dynamic_out,
    Static(...)``) as the user's: ``result[1][0].layers[0].weight`` ->
    ``result[0].layers[0].weight``."""
    if path == "result[0]":
        return EQX_MARKER
    if path.startswith("result[1]"):
        return "result" + path[len("result[1]"):]
    return path


# --------------------------------------------------------------------- NNX --


def _nnx(fun: Any, args: tuple[Any, ...], kwargs: dict[str, Any], out: Any,
         style: Style, arguments: Sequence[Argument]) -> Wrapped:
    """``nnx.jit`` keeps the user's arguments in place: each graph node becomes
    a ``NodeStates`` pytree whose leaves are the node's variables."""
    user = inspect.unwrap(fun)
    inputs = _nnx_inputs(args, kwargs, arguments)
    return Wrapped(
        framework="nnx", function=user, style=NnxJit(style), arguments=None,
        input_names=None if inputs is None else inputs[0],
        output_names=_nnx_outputs(user, out), parameters=None,
        input_roles=None if inputs is None else inputs[1])


def _nnx_inputs(args: tuple[Any, ...], kwargs: dict[str, Any], arguments: Sequence[Argument]
                ) -> tuple[tuple[str, ...], tuple[str | None, ...]] | None:
    """The inputs' names, and the roles their Variable types say."""
    values = [args[a.position] if a.position is not None else kwargs[a.name or ""]
              for a in arguments]
    roles: list[str | None] = []
    names = _names(values, [a.label if a.name is None else a.name for a in arguments],
                   roles=roles)
    if names is None or len(names) != sum(len(a.leaves) for a in arguments):
        return None
    return tuple(names), tuple(roles)


def _nnx_outputs(user: Any, out: Any) -> tuple[str, ...] | None:
    """``JitFn`` returns ``(args_out, kwargs_out, out)``: the state of every graph
    node argument, written back into it after the call, and the user's result."""
    args_out, kwargs_out, result = out
    params = _positional_names(user, len(args_out))
    values = [*args_out, *(kwargs_out[k] for k in sorted(kwargs_out)), result]
    prefixes = [*params, *sorted(kwargs_out), "result"]
    names = _names(values, prefixes, suffix=[WRITTEN_BACK] * (len(values) - 1) + [""])
    return None if names is None else tuple(names)


def _names(values: Sequence[Any], prefixes: Sequence[str],
           suffix: Sequence[str] | None = None, roles: list[str | None] | None = None
           ) -> list[str] | None:
    """Every flat leaf of ``values`` (one pytree per prefix, flattened together as
    JAX does), named ``prefix`` + the path within; ``None`` if a graph's paths are
    unknown. ``roles``, where given, gets each leaf's role by its Variable's type."""
    node_paths = iter(_frameworks.nnx_state_paths(list(values)))
    names: list[str] = []
    found: list[str | None] = []
    for i, value in enumerate(values):
        end = suffix[i] if suffix is not None else ""
        flat, _ = jax.tree_util.tree_flatten_with_path(
            value, is_leaf=_frameworks.is_nnx_node_states)
        for path, leaf in flat:
            where = prefixes[i] + jax.tree_util.keystr(path)
            if not _frameworks.is_nnx_node_states(leaf):
                names.append(where + end)
                found.append(None)
                continue
            paths = next(node_paths, None)
            count = len(jax.tree_util.tree_leaves(leaf))
            if paths is None or len(paths) != count:
                return None
            names.extend(where + p + end for p, _ in paths)
            found.extend(_frameworks.type_role(kinds) for _, kinds in paths)
    if roles is not None:
        roles.extend(found)
    return names


def _type_roles(tree: Any, count: int) -> list[str | None]:
    """Each leaf's role by its framework's types (``None`` each where unreadable)."""
    try:
        found = list(_frameworks.leaf_type_roles(tree))
    except Exception:  # a pytree node this JAX cannot describe: no roles from types
        return [None] * count
    return found if len(found) == count else [None] * count


# ------------------------------------------------------------------ shared --


def _positional_names(function: Any, count: int) -> list[str]:
    """The parameter name of each of the first ``count`` positional arguments;
    ``args[i]`` past them (a ``*args`` parameter) or without a signature."""
    try:
        params = list(inspect.signature(function).parameters.values())
    except (TypeError, ValueError):
        params = []
    positional = [p.name for p in params if p.kind in (inspect.Parameter.POSITIONAL_ONLY,
                                                       inspect.Parameter.POSITIONAL_OR_KEYWORD)]
    star = next((p.name for p in params if p.kind == inspect.Parameter.VAR_POSITIONAL), "args")
    return [positional[i] if i < len(positional) else f"{star}[{i - len(positional)}]"
            for i in range(count)]


def renamed(wrapped: Wrapped | None, facts: CompiledFacts | None) -> CompiledFacts | None:
    """``facts`` with every input and output leaf named as the user knows it."""
    if wrapped is None or facts is None:
        return facts
    program = facts.program
    if wrapped.framework == "equinox":
        outputs = tuple(replace(leaf, path=equinox_output_name(leaf.path))
                        for leaf in program.outputs)
    else:
        outputs = _renamed_leaves(program.outputs, wrapped.output_names)
    inputs = _renamed_leaves(program.inputs, wrapped.input_names)
    roles = (wrapped.input_roles if wrapped.input_roles is not None
             and len(wrapped.input_roles) == len(inputs) else program.type_roles)
    return replace(facts, program=replace(program, inputs=inputs, outputs=outputs,
                                          type_roles=roles))


def _renamed_leaves(leaves: Sequence[Any], names: Sequence[str] | None) -> tuple[Any, ...]:
    # One name per leaf, or JAX's names are kept.
    if names is None or len(names) != len(leaves):
        return tuple(leaves)
    return tuple(replace(leaf, path=name) for leaf, name in zip(leaves, names, strict=True))
