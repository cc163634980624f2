"""What the lowered ``main`` says before XLA decides anything: the attributes
JAX put on its arguments and results, how JAX threaded the call's Refs through
it (``pxla._discharge_refs``), and what the traced program does with each Ref.

The private reads (the MLIR bindings, the lowering's ``MutationData``, the
effects on the jaxpr) are :mod:`memscope._compat`'s; the walks over them are here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from memscope import _compat

AttrValue = bool | int | str


def _attr_value(attr: Any) -> AttrValue:
    # These bindings hand back attributes already downcast to their Python class.
    ir = _compat.stages.mlir_ir()
    if isinstance(attr, ir.BoolAttr):
        return bool(attr.value)
    if isinstance(attr, ir.IntegerAttr):
        return int(attr.value)
    if isinstance(attr, ir.StringAttr):
        return str(attr.value)
    return str(attr)


def _attr_dicts(array_attr: Any, count: int) -> tuple[dict[str, AttrValue], ...]:
    if array_attr is None:
        return tuple({} for _ in range(count))
    ir = _compat.stages.mlir_ir()
    dicts = []
    for entry in array_attr:
        d: Any = ir.DictAttr(entry)  # iterable at runtime; the stubs do not say so
        dicts.append({named.name: _attr_value(named.attr) for named in d})
    return tuple(dicts)


@dataclass(frozen=True)
class MainSignature:
    """Attributes JAX put on the arguments and results of the lowered ``main``.

    ``tf.aliasing_output`` (a fixed alias), ``jax.buffer_donor`` (an optional
    donation left to XLA) and ``jax.token`` (an effect token) are JAX's request
    to the compiler, before XLA decides anything.
    """

    args: tuple[dict[str, AttrValue], ...]
    results: tuple[dict[str, AttrValue], ...]


def main_signature(lowered: Any) -> MainSignature:
    """Read the argument and result attributes of ``main`` from the StableHLO module."""
    ir = _compat.stages.mlir_ir()
    module = lowered.compiler_ir("stablehlo")
    with module.context:
        for op in module.body.operations:
            if op.operation.name != "func.func":
                continue
            if ir.StringAttr(op.attributes["sym_name"]).value != "main":
                continue
            ftype = ir.FunctionType(ir.TypeAttr(op.attributes["function_type"]).value)
            attrs = op.attributes
            return MainSignature(
                args=_attr_dicts(_compat.stages.op_attribute(attrs, "arg_attrs"),
                                 len(ftype.inputs)),
                results=_attr_dicts(_compat.stages.op_attribute(attrs, "res_attrs"),
                                    len(ftype.results)),
            )
    raise LookupError("the lowered module has no main function")


#: What a jitted function does with a Ref it is given or closes over, from the
#: read, write and accumulate effects JAX records on the traced jaxpr.
RefEffectKind = str  # "updated" | "read" | "written" | "unused"


@dataclass(frozen=True)
class RefLayout:
    """How JAX lowered a call's Refs (``pxla._discharge_refs``): each Ref the
    program keeps becomes an extra result of ``main`` aliased to its argument,
    and each Ref it closes over an extra argument after the kept ones.

    ``writes_back`` has one entry per non-token result of ``main``: the
    non-token argument whose Ref it holds the new value of, else ``None``.
    ``closed_over`` counts the Refs appended to the arguments.
    """

    writes_back: tuple[int | None, ...]
    closed_over: int


def ref_layout(lowered: Any) -> RefLayout | None:
    """The lowering's ``MutationData`` (its compile arguments' ``mut``) as
    indices; ``None`` when the program has no Ref argument (0.7 to 0.10)."""
    mutation = _compat.values.ref_mutation(lowered)
    if mutation is None:
        return None
    writes_back, closed = mutation
    return RefLayout(writes_back=writes_back, closed_over=len(closed))


def ref_accesses(closed_jaxpr: Any) -> tuple[tuple[RefEffectKind | None, ...],
                                             list[tuple[Any, RefEffectKind]]]:
    """What the traced program does with each Ref: per argument (``None`` for
    one that is not a Ref), and ``(ref, access)`` for each Ref it closes over,
    from the effects JAX records per Ref (:func:`memscope._compat.values.ref_effects`).
    """
    seen: dict[int, set[str]] = {}
    for where, kind in _compat.values.ref_effects(closed_jaxpr):
        seen.setdefault(where, set()).add(kind)

    def access(i: int) -> RefEffectKind:
        kinds = seen.get(i, set())
        if "updated" in kinds or kinds == {"read", "written"}:
            return "updated"
        return next(iter(kinds)) if kinds else "unused"

    jaxpr = closed_jaxpr.jaxpr
    n = len(jaxpr.constvars)
    args = tuple(access(n + i) if _compat.values.is_ref_aval(v.aval) else None
                 for i, v in enumerate(jaxpr.invars))
    consts = [(c, access(i)) for i, c in enumerate(closed_jaxpr.consts)
              if _compat.values.is_ref(c)]
    return args, consts
