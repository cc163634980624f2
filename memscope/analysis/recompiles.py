"""Why a function compiled again: pure comparisons of two signatures of one function.

A signature is what JAX keys its executables on (see :mod:`memscope.capturing.keys`): per
dynamic leaf its kind (array or Python scalar), shape, dtype, weak type and
placement; the static arguments' values; the tree structure of the arguments;
and the jit object's donation. :func:`explain` says, leaf by leaf, what differs
between a signature and the nearest earlier one, in words a user can act on.

No JAX here: :mod:`memscope.capturing.between` turns a captured call into these records.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass

from memscope.report import Recompile, RecompileReason

#: Differing leaves named per recompile; the rest are counted in ``more``.
MAX_REASONS = 5


@dataclass(frozen=True)
class LeafShape:
    """One dynamic leaf of a signature, as JAX's dispatch tells leaves apart."""

    path: str
    #: ``array``, ``numpy array`` or the Python type's name (``float``)
    kind: str
    shape: tuple[int, ...] | None
    dtype: str | None
    weak_type: bool
    #: equal for shardings JAX places alike (``None`` for Python scalars)
    placement: Hashable | None
    #: the sharding as spelled (``P(None, None) on x=2``)
    sharding: str | None = None


@dataclass(frozen=True)
class SignatureShape:
    """One signature of a function, leaf by leaf."""

    leaves: tuple[LeafShape, ...]
    #: static arguments by name (``#1`` for a positional one) and value text
    statics: tuple[tuple[str, str], ...]
    #: the arguments' tree structure as text
    tree: str
    #: the jit object's donation in jax.jit's keywords (``donate_argnums=(0,)``)
    donation: str


def explain(earlier: Sequence[SignatureShape], now: SignatureShape) -> Recompile | None:
    """What sets ``now`` apart from the nearest of the ``earlier`` signatures (the
    one with the fewest differences, the latest on a tie); ``None`` without any."""
    best: tuple[int, list[RecompileReason]] | None = None
    for number, then in enumerate(earlier, start=1):
        found = signature_differences(then, now)
        if best is None or len(found) <= len(best[1]):
            best = (number, found)
    if best is None:
        return None
    number, found = best
    return Recompile(since=number, reasons=tuple(found[:MAX_REASONS]),
                     more=max(0, len(found) - MAX_REASONS))


def signature_differences(then: SignatureShape, now: SignatureShape) -> list[RecompileReason]:
    """Every difference between two signatures, the call as a whole first."""
    out: list[RecompileReason] = []
    if then.donation != now.donation:
        out.append(RecompileReason("", "donation", then.donation, now.donation,
                                   "another jit object with another donation: jit the "
                                   "function once and call that one"))
    before = dict(then.statics)
    for name, value in now.statics:
        if name in before and before[name] != value:
            out.append(RecompileReason(name, "static", before[name], value,
                                       "each new value of a static argument compiles anew: "
                                       "pass it as an array, not static, if it varies"))
    old = {leaf.path: leaf for leaf in then.leaves}
    new = {leaf.path: leaf for leaf in now.leaves}
    if then.tree != now.tree or old.keys() != new.keys():
        gone = [p for p in old if p not in new]
        added = [p for p in new if p not in old]
        detail = ", ".join(filter(None, (
            f"no longer passed: {', '.join(gone[:3])}" if gone else "",
            f"new: {', '.join(added[:3])}" if added else "")))
        out.append(RecompileReason("", "tree", _short(then.tree), _short(now.tree),
                                   (detail + ". " if detail else "")
                                   + "Pass the same pytree structure every call: the same "
                                   "keys, None in the same places, tuples not lists"))
    for path, leaf in new.items():
        if path in old:
            out += _leaf_differences(old[path], leaf)
    if not out:
        out.append(RecompileReason("", "unknown", "", "",
                                   "memscope sees no difference in the arguments, so the "
                                   "function object differs: a closure, a new lambda or "
                                   "functools.partial made each step, or one whose code "
                                   "reads globals that changed? Define it once"))
    return out


def _leaf_differences(a: LeafShape, b: LeafShape) -> list[RecompileReason]:
    path = a.path
    if a.kind != b.kind:
        return [RecompileReason(path, "kind", _kind(a), _kind(b),
                                "pass the same kind every call: wrap the value with "
                                "jnp.asarray(value, dtype) once")]
    out = []
    if a.shape != b.shape:
        out.append(RecompileReason(path, "shape", _aval(a), _aval(b), _shape_advice(a, b)))
    if a.dtype != b.dtype:
        out.append(RecompileReason(path, "dtype", _aval(a), _aval(b),
                                   f"cast it to one dtype before the call, as "
                                   f"x.astype(jnp.{a.dtype})"))
    if a.weak_type != b.weak_type and a.dtype == b.dtype:
        weak, strong = (a, b) if a.weak_type else (b, a)
        out.append(RecompileReason(
            path, "weak_type", _weak(a), _weak(b),
            f"weak-typed on the {'earlier' if weak is a else 'later'} call, as made from a "
            f"Python scalar by jnp.full(shape, 0.01) or x * 1.0: pass dtype= to make it "
            f"{strong.dtype or 'strongly typed'} on every call"))
    if a.placement != b.placement:
        out.append(RecompileReason(path, "sharding", a.sharding or "n/a", b.sharding or "n/a",
                                   "place it the same way every call: one jax.device_put "
                                   "with one sharding"))
    elif a.sharding != b.sharding and a.sharding is not None and b.sharding is not None \
            and not out:
        out.append(RecompileReason(path, "sharding_spelling", a.sharding, b.sharding,
                                   "the same placement spelled two ways, as P() and "
                                   "P(None, None): spell it one way everywhere"))
    return out


def _shape_advice(a: LeafShape, b: LeafShape) -> str:
    sa, sb = a.shape or (), b.shape or ()
    if len(sa) == len(sb) and len(sa) > 0 and sa[1:] == sb[1:]:
        return ("only the leading dimension changed, a ragged last batch? Pad the batch "
                "to one size, or drop the remainder")
    return "every new shape compiles anew: pad or bucket it to a few fixed shapes"


def _aval(leaf: LeafShape) -> str:
    if leaf.shape is None or leaf.dtype is None:
        return leaf.kind
    return f"{leaf.dtype}[{','.join(map(str, leaf.shape))}]"


def _weak(leaf: LeafShape) -> str:
    return f"{'weak-typed ' if leaf.weak_type else ''}{_aval(leaf)}"


def _kind(leaf: LeafShape) -> str:
    if leaf.kind in ("array", "numpy array", "Ref"):
        return f"{leaf.kind} {_aval(leaf)}"
    return f"Python {leaf.kind}"


def _short(text: str, limit: int = 80) -> str:
    return text if len(text) <= limit else text[:limit - 1] + "…"
