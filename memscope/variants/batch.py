"""Which captured call ``memscope fit`` resizes, and along which axis: the call
kept in shapes (:class:`KeptCall`), the function chosen, and its batch axis,
given (``--batch x:0``, ``x:-1``) or found (the leading axis the arguments
share that no output keeps). The search over sizes is :mod:`memscope.variants.search`'s.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

import jax

from memscope.compiled.read import CompiledFacts
from memscope.errors import MemscopeError
from memscope.variants.donation import Argument
from memscope.variants.donation_variants import VariantFacts


@dataclass(frozen=True)
class KeptCall:
    """A call in shapes: the jit object JAX made, the call's arguments with every
    array as a ``jax.ShapeDtypeStruct`` (shape, dtype, sharding), and its dynamic
    top-level arguments in JAX's terms. Enough to compile it again at other
    shapes; no array is kept. ``memscope fit`` keeps the jit object until it has
    answered; a post-mortem (a call that ran out of memory) holds it weakly
    (``jitted`` a ``weakref.ref``, ``weak``), never longer than the program."""

    jitted: Any
    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    #: the call's arguments in the user's terms (a framework's wrapper's user
    #: arguments, where it made the jit), each with its flat leaves in JAX's order
    arguments: tuple[Argument, ...]
    weak: bool = False
    #: the user's function and the options of its ``jax.jit``, to trace it again
    #: under a checkpoint policy (``memscope fit --plan``); ``None`` where held weakly
    fun: Any = None
    options: dict[str, Any] | None = None
    #: JAX's own top-level arguments of ``args``/``kwargs`` (where they are not
    #: ``arguments``: an ``eqx.filter_jit`` call), to find each flat leaf's value
    jax_arguments: tuple[Argument, ...] | None = None

    def values(self) -> list[Any]:
        """The call's flat dynamic leaves, in JAX's order, one per number of
        :attr:`Argument.leaves` (``None`` past what the arguments flatten to): a
        ``jax.ShapeDtypeStruct`` for each array."""
        count = sum(len(a.leaves) for a in self.arguments)
        found = [leaf for a in self._top() for leaf in jax.tree_util.tree_leaves(
            argument_value(self, a))]
        return (found + [None] * count)[:count]

    def with_values(self, new: dict[int, Any]) -> tuple[tuple[Any, ...], dict[str, Any]]:
        """``(args, kwargs)`` with the flat leaves numbered in ``new`` replaced."""
        args, kwargs, start = list(self.args), dict(self.kwargs), 0
        for a in self._top():
            leaves, tree = jax.tree_util.tree_flatten(argument_value(self, a))
            if any(start + k in new for k in range(len(leaves))):
                value = jax.tree_util.tree_unflatten(
                    tree, [new.get(start + k, leaf) for k, leaf in enumerate(leaves)])
                if a.position is not None:
                    args[a.position] = value
                else:
                    kwargs[a.name or ""] = value
            start += len(leaves)
        return tuple(args), kwargs

    def _top(self) -> tuple[Argument, ...]:
        return self.jax_arguments if self.jax_arguments is not None else self.arguments

    def function(self) -> Any:
        """The jit object; ``None`` where it was held weakly and is gone."""
        return self.jitted() if self.weak else self.jitted



class Recorded(Protocol):
    """What the fit needs of a recorded call (a capture's entry)."""

    @property
    def name(self) -> str: ...
    @property
    def source(self) -> str | None: ...
    @property
    def facts(self) -> CompiledFacts | None: ...
    @property
    def variants(self) -> Sequence[VariantFacts]: ...
    @property
    def call(self) -> KeptCall | None: ...


E = TypeVar("E", bound=Recorded)


@dataclass(frozen=True)
class BatchChoice:
    """The arguments whose leaves are resized, each on its axis (``axes``, one
    per argument), from which size."""

    arguments: tuple[Argument, ...]
    axes: tuple[int, ...]
    size: int
    step: int
    inferred: bool
    note: str

    @property
    def label(self) -> str:
        return ", ".join(a.label for a in self.arguments)

    @property
    def axis(self) -> int:
        """The first argument's axis (``note`` says each where they differ)."""
        return self.axes[0] if self.axes else 0

    @property
    def specs(self) -> str:
        """The choice as ``ARG:AXIS`` specs: ``x:0, y:0``."""
        return ", ".join(f"{spec_name(a)}:{axis}" for a, axis in zip(self.arguments,
                                                                     self.axes, strict=True))


def choose_function(entries: Sequence[E], name: str | None) -> E:
    """The entry called ``name`` (its largest-peak signature), else the one with
    the largest peak.

    Raises:
        MemscopeError: no entry can be compiled again, or none is called ``name``.
    """
    kept = [e for e in entries if e.call is not None]
    if name is not None:
        named = [e for e in kept if e.name == name]
        if not named:
            known = ", ".join(sorted({e.name for e in kept})) or "none"
            raise MemscopeError(f"no jitted function called {name!r} was captured "
                                f"(captured: {known}); give one with --function NAME")
        kept = named
    if not kept:
        raise MemscopeError("no jitted call was captured that memscope can compile again")
    return max(kept, key=lambda e: recorded_peak(e) or -1)


def recorded_peak(entry: Recorded) -> int | None:
    return entry.facts.memory.peak_bytes if entry.facts is not None else None


def choose_batch(entry: Recorded, specs: Sequence[str] = ()) -> BatchChoice:
    """The batch axis: each of ``specs`` (``ARG[:AXIS]``, an argument's name or
    position; a negative AXIS counts from the end of the argument's arrays, and the
    choice holds it counted from 0), resized together, else axis 0 of the arguments
    that are not state (:func:`state_arguments`) whose arrays all share their
    leading size, at the size most of them share (the largest where sizes are
    equally common; where no argument's arrays share one, the most common
    leading size of their arrays).

    Raises:
        MemscopeError: a spec names no argument or axis (a negative one beyond
            the rank of the argument's arrays, or where they differ in rank), names
            one argument twice, or the named arguments differ in size; no axis can
            be inferred.
    """
    call = entry.call
    assert call is not None
    shapes = leaf_shapes(call)
    if specs:
        return _given_batch(call, specs, shapes)
    data = data_arguments(entry, shapes)
    state = [a for a in call.arguments if a.has_arrays and a not in data]
    lead = [_leading(shapes[i]) for i in range(len(shapes))]
    leading = [n for a in data for i in a.leaves if (n := lead[i]) is not None]
    if not leading:
        what = (f"the arguments with arrays ({', '.join(a.label for a in state)}) are all "
                "state: the step returns arrays of each one's shapes" if state else
                "no argument has an array with an axis")
        raise MemscopeError(f"{entry.name}: no batch axis to infer: {what}; give one "
                            "with --batch ARG[:AXIS]")
    # A batch argument's arrays share their leading size; a model's (not returned
    # by an evaluation step, say) have many. Such arguments, by their count,
    # choose the size; where none has one size, the leaves do.
    uniform: dict[int, int] = {}
    for a in data:
        sizes = {n for i in a.leaves if (n := lead[i]) is not None}
        if len(sizes) == 1:
            uniform[id(a)] = sizes.pop()
    counted = list(uniform.values()) or leading
    size = max(set(counted), key=lambda n: (counted.count(n), n))
    chosen_args = tuple(a for a in data if (uniform.get(id(a)) == size if uniform
                                            else any(lead[i] == size for i in a.leaves)))
    why = (f"{', '.join(a.label for a in chosen_args)}, axis 0 (inferred: the leading "
           "axis of the arguments that are not state" + (
               f"; state, returned by the step: {', '.join(a.label for a in state)}"
               if state else "") + ")")
    return _with_step(call, chosen_args, (0,) * len(chosen_args), size, True, why)


def _given_batch(call: KeptCall, specs: Sequence[str],
                 shapes: list[tuple[int, ...] | None]) -> BatchChoice:
    """The choice ``--batch`` gives: each ``ARG[:AXIS]`` at its most common size
    along that axis, all at one size."""
    chosen: list[tuple[Argument, int, int]] = []
    counted_back: list[str] = []
    for spec in specs:
        argument, given = _parse_batch(spec, call.arguments)
        if any(argument is a for a, _, _ in chosen):
            raise MemscopeError(f"--batch {spec}: {argument.label} is named twice; "
                                "give each argument once")
        axis = _from_the_front(spec, argument, given, shapes)
        if axis != given:
            counted_back.append(f"{spec_name(argument)}:{given} is axis {axis}")
        sizes = [shape[axis] for i in argument.leaves
                 if (shape := shapes[i]) is not None and len(shape) > axis]
        if not sizes:
            if all(shapes[i] is None for i in argument.leaves):
                values = call.values()
                kinds = sorted({type(values[i]).__name__ for i in argument.leaves})
                raise MemscopeError(
                    f"--batch {spec}: {argument.label} holds no array (a "
                    f"{' and a '.join(kinds) or 'static value'}), so there is nothing to "
                    "resize: name an argument the step gets arrays in (a jax.Array or a "
                    "NumPy array)")
            raise MemscopeError(f"--batch {spec}: {argument.label} has no array with an "
                                f"axis {axis}")
        chosen.append((argument, axis, max(set(sizes), key=sizes.count)))
    if len({size for _, _, size in chosen}) > 1:
        said = ", ".join(f"{spec_name(a)}:{axis} is {size}" for a, axis, size in chosen)
        raise MemscopeError(f"--batch {' --batch '.join(specs)}: {said}; the arguments "
                            "resized together must have one batch size")
    arguments = tuple(a for a, _, _ in chosen)
    axes = tuple(axis for _, axis, _ in chosen)
    how = f"(given; {', '.join(counted_back)})" if counted_back else "(given)"
    note = (f"{', '.join(a.label for a in arguments)}, axis {axes[0]} {how}"
            if len(set(axes)) == 1 else
            ", ".join(f"{a.label} axis {axis}" for a, axis, _ in chosen) + f" {how}")
    return _with_step(call, arguments, axes, chosen[0][2], False, note)


def _from_the_front(spec: str, argument: Argument, axis: int,
                    shapes: list[tuple[int, ...] | None]) -> int:
    """``axis`` counted from 0: a negative one counts from the end, as NumPy and
    ``jax.vmap`` count it, against the rank of the argument's arrays (scalars,
    which have no axis, left aside).

    Raises:
        MemscopeError: a negative axis where the argument's arrays differ in rank
            (it would be another axis in each) or have fewer axes.
    """
    if axis >= 0:
        return axis
    arrays = [shape for i in argument.leaves if (shape := shapes[i]) is not None]
    ranks = sorted({len(shape) for shape in arrays if shape})
    if not ranks:
        raise MemscopeError(f"--batch {spec}: {argument.label} has no array with an axis")
    if len(ranks) > 1:
        raise MemscopeError(f"--batch {spec}: {argument.label}'s arrays have "
                            f"{' and '.join(map(str, ranks))} axes, so {axis} would be "
                            "another axis in each; give AXIS counted from 0")
    rank = ranks[0]
    if axis < -rank:
        whose = (f"{argument.label} has" if len(arrays) == 1 else
                 f"{argument.label}'s arrays have" if all(arrays) else
                 f"{argument.label}'s arrays (scalars aside) have")
        axes = "1 axis, so AXIS is 0 or -1" if rank == 1 else (
            f"{rank} axes, so AXIS is 0 to {rank - 1} or -{rank} to -1")
        raise MemscopeError(f"--batch {spec}: {whose} {axes}")
    return axis + rank


def state_arguments(entry: Recorded, shapes: list[tuple[int, ...] | None]
                    ) -> list[Argument]:
    """The arguments that are state: the step returns each one updated, so every
    array of it has an output of its shape and dtype, each output counted once
    (a model, an optimizer state; donated or not, through any framework's jit).
    Larger arguments take their outputs first: a batch whose shape happens to
    be a weight's finds that output taken by the weights. Without the compiled
    program's outputs, none."""
    call = entry.call
    assert call is not None
    if entry.facts is None:
        return []
    outputs: dict[Any, int] = {}
    for leaf in entry.facts.program.outputs:
        shape_dtype = (tuple(leaf.shape), str(leaf.dtype))
        outputs[shape_dtype] = outputs.get(shape_dtype, 0) + 1
    dtypes = _leaf_dtypes(call)
    state = []
    for a in sorted((a for a in call.arguments if a.has_arrays),
                    key=lambda a: -len(a.leaves)):
        keys = [(shapes[i], dtypes[i]) for i in a.leaves if shapes[i] is not None]
        wanted: dict[Any, int] = {}
        for key in keys:
            wanted[key] = wanted.get(key, 0) + 1
        if keys and all(outputs.get(key, 0) >= n for key, n in wanted.items()):
            for key, n in wanted.items():
                outputs[key] -= n
            state.append(a)
    return [a for a in call.arguments if a in state]


def data_arguments(entry: Recorded, shapes: list[tuple[int, ...] | None]) -> list[Argument]:
    """The arguments with arrays that are not state (:func:`state_arguments`)."""
    call = entry.call
    assert call is not None
    state = state_arguments(entry, shapes)
    return [a for a in call.arguments if a.has_arrays and a not in state]


def _leaf_dtypes(call: KeptCall) -> list[str | None]:
    return [str(leaf.dtype) if isinstance(leaf, jax.ShapeDtypeStruct) else None
            for leaf in call.values()]


def spec_name(a: Argument) -> str:
    """How ``--batch`` names the argument: its name, else its position."""
    return a.name if a.name is not None else str(a.position)


def _leading(shape: tuple[int, ...] | None) -> int | None:
    return shape[0] if shape else None


def _parse_batch(spec: str, arguments: Sequence[Argument]) -> tuple[Argument, int]:
    name, _, axis_text = spec.partition(":")
    try:
        axis = int(axis_text) if axis_text else 0
    except ValueError:
        raise MemscopeError(f"--batch {spec}: AXIS must be a whole number") from None
    for a in arguments:
        if name == a.name or (name.isdigit() and a.position == int(name)):
            return a, axis
    labels = ", ".join(a.name or str(a.position) for a in arguments)
    raise MemscopeError(f"--batch {spec}: no argument {name!r}; the arguments are {labels}")


def leaf_shapes(call: KeptCall) -> list[tuple[int, ...] | None]:
    """The shape of each dynamic flat leaf, in :class:`Argument` numbering."""
    return [tuple(leaf.shape) if isinstance(leaf, jax.ShapeDtypeStruct) else None
            for leaf in call.values()]


def argument_value(call: KeptCall, a: Argument) -> Any:
    return call.args[a.position] if a.position is not None else call.kwargs[a.name or ""]


def _with_step(call: KeptCall, chosen: tuple[Argument, ...], axes: tuple[int, ...],
               size: int, inferred: bool, note: str) -> BatchChoice:
    """The choice, with the step its shardings allow: a batch must split evenly
    over the devices the batch axis is sharded across."""
    step = 1
    values = call.values()
    for a, axis in zip(chosen, axes, strict=True):
        for i in a.leaves:
            leaf = values[i]
            if (isinstance(leaf, jax.ShapeDtypeStruct) and len(leaf.shape) > axis
                    and leaf.shape[axis] == size and leaf.sharding is not None):
                shard = leaf.sharding.shard_shape(leaf.shape)[axis]
                step = math.lcm(step, max(size // max(shard, 1), 1))
    return BatchChoice(chosen, axes, size, step, inferred, note)
