"""Pure functions: classified buffers -> donation candidates, and every fate in words.

No JAX here. The explanations replay the rule JAX applies while lowering
(``mlir._set_up_aliases``): outputs, in order, each take the first donated
argument left with the same shape and dtype as a fixed alias; from JAX 0.8,
donated arguments still left then take an unmatched output with the same element
count, as an optional buffer donor XLA may or may not use (JAX 0.7 has no such
pass); whatever is left is "not usable".
Replaying it tells *why* a leaf ended where the compiled program says it did.
"""

from __future__ import annotations

import math
import re
from collections import defaultdict, deque
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Literal, get_args

from memscope.compiled.program import Leaf, Program
from memscope.errors import MemscopeError
from memscope.report import InputBuffer, OutputBuffer, is_host_kind
from memscope.report.paths import bounded, bounded_leaves
from memscope.report.units import format_bytes

CAVEAT = ("Donate only arguments the program does not read after the call: a donated "
          "array is deleted by the call.")

Aval = tuple[tuple[int, ...], str]

#: Which donation variants a run compiles: none; the advised donation only (the
#: advice line with its measured peak); or also "no donation" and "donate all".
AdviceLevel = Literal["off", "advised", "full"]
ADVICE_LEVELS: tuple[AdviceLevel, ...] = get_args(AdviceLevel)


#: The advice takes the largest peak saving whose FLOPs grow by at most this
#: fraction: about one more forward pass (a training step's backward pass costs
#: about twice its forward, so recomputing all of it, ``nothing_saveable``, adds
#: about a third), which puts every standard policy in reach; a lower figure
#: keeps to the dot policies. ``capture(remat_flops=...)`` and ``memscope run
#: --remat-flops`` change it.
DEFAULT_MAX_FLOPS_INCREASE = 0.35


def advice_level(advise: bool | str) -> AdviceLevel:
    """``advise`` as a level: ``True`` is ``"full"``, ``False`` is ``"off"``.

    Raises:
        MemscopeError: a string that is not one of :data:`ADVICE_LEVELS`.
    """
    if advise is True or advise is False:
        return "full" if advise else "off"
    for level in ADVICE_LEVELS:
        if advise == level:
            return level
    raise MemscopeError(f"advice must be one of {', '.join(ADVICE_LEVELS)}; got {advise!r}")


def _local_shape(b: InputBuffer | OutputBuffer) -> tuple[int, ...]:
    # JAX pairs the avals of one device's shard (mlir.sharded_aval), so a leaf
    # sharded differently from an output of the same global shape does not match.
    return b.shard_shape if b.shard_shape is not None else b.shape


def _aval(b: InputBuffer | OutputBuffer) -> Aval:
    return _local_shape(b), b.dtype


def _aval_text(b: InputBuffer | OutputBuffer) -> str:
    return f"{b.dtype}[{','.join(map(str, b.shape))}]"


def candidates(inputs: Sequence[InputBuffer], outputs: Sequence[OutputBuffer], *,
               beside_refs: bool = False) -> dict[int, int]:
    """Non-donated input leaves an output could take over: ``{input: output}``.

    An output that reuses no input can take a non-donated input of its shape
    and dtype. An input the output merely copies is paired first, since
    donating it also removes the copy. Leaves in host memory are never
    candidates: donating them would save no device memory. A ``jax.Ref`` is
    never one, nor (unless ``beside_refs``) a leaf of an argument that holds a
    Ref: ``jax.jit`` donates whole arguments, and a Ref is not to be donated.
    Nor is a leaf the caller passed again at a later call (``passed_again``):
    it keeps that array, which a donating call would delete. A token
    (``jax.lax.create_token()``) holds no buffer: never one, nor taken.
    """
    free: dict[Aval, deque[int]] = defaultdict(deque)
    for j, o in enumerate(outputs):
        if o.fate != "reuses_input" and not is_host_kind(o.memory_kind) and o.dtype != "token":
            free[_aval(o)].append(j)
    copied = {o.input: j for j, o in enumerate(outputs) if o.fate == "copy_of_input"}
    chosen: dict[int, int] = {}
    # A jax.Ref is updated in place by JAX itself: never a candidate.
    with_refs = set() if beside_refs else {_argument(b.path) for b in inputs
                                           if b.ref is not None}
    open_inputs = [i for i, b in enumerate(inputs)
                   if b.fate == "not_donated" and not is_host_kind(b.memory_kind)
                   and b.ref is None and _argument(b.path) not in with_refs
                   and b.passed_again is None and b.dtype != "token"]
    for i in open_inputs:
        copy = copied.get(inputs[i].path)
        if copy is not None and copy in free[_aval(inputs[i])]:
            free[_aval(inputs[i])].remove(copy)
            chosen[i] = copy
    for i in open_inputs:
        queue = free[_aval(inputs[i])]
        if i not in chosen and queue:
            chosen[i] = queue.popleft()
    return dict(sorted(chosen.items()))


@dataclass(frozen=True)
class _Pairing:
    same_aval: dict[int, int]   # donated input -> output JAX would alias it with
    same_size: dict[int, int]   # donated input -> output JAX would offer it to as a donor


def _replay_jax(inputs: Sequence[InputBuffer], outputs: Sequence[OutputBuffer], *,
                same_size_donors: bool = True) -> _Pairing:
    donated = [i for i, b in enumerate(inputs) if b.donated and b.fate != "pruned"]
    by_aval: dict[Aval, deque[int]] = defaultdict(deque)
    for i in donated:
        by_aval[_aval(inputs[i])].append(i)
    same_aval: dict[int, int] = {}
    for j, o in enumerate(outputs):
        queue = by_aval.get(_aval(o))
        if queue:
            same_aval[queue.popleft()] = j
    if not same_size_donors:
        return _Pairing(same_aval, {})
    taken = set(same_aval.values())
    by_size: dict[int, deque[int]] = defaultdict(deque)
    for j, o in enumerate(outputs):
        if j not in taken:
            by_size[math.prod(_local_shape(o))].append(j)
    same_size: dict[int, int] = {}
    for i in donated:
        queue = by_size[math.prod(_local_shape(inputs[i]))]
        if i not in same_aval and queue:
            same_size[i] = queue.popleft()
    return _Pairing(same_aval, same_size)


def annotate(inputs: Sequence[InputBuffer], outputs: Sequence[OutputBuffer], *,
             same_size_donors: bool) -> tuple[InputBuffer, ...]:
    """Every input with ``candidate`` set and, where a fate needs one, a ``reason``.

    Each reason says why the leaf ended as it did and what to change.
    ``same_size_donors`` says whether the JAX that lowered the program has
    ``_set_up_aliases``' element-count pass (0.8 and later): pass
    ``memscope._compat.SAME_SIZE_DONORS``.
    """
    pairing = _replay_jax(inputs, outputs, same_size_donors=same_size_donors)
    chosen = candidates(inputs, outputs)
    refs_beside: dict[str, str] = {}
    for b in inputs:
        if b.ref is not None:
            refs_beside.setdefault(_argument(b.path), b.path)
    # Leaves an output could take but for a Ref in their argument: said, not advised.
    blocked = {i: o for i, o in candidates(inputs, outputs, beside_refs=True).items()
               if i not in chosen} if refs_beside else {}
    result = []
    for i, b in enumerate(inputs):
        reason = None
        if b.ref is not None:
            reason = _ref_reason(b)
        elif b.fate == "donor":
            reason = _donor_reason(b, i, pairing, outputs)
        elif b.fate == "unusable":
            reason = _unusable_reason(b, i, pairing, inputs, outputs,
                                      same_size_donors=same_size_donors)
        elif b.passed_again is not None and b.fate == "not_donated":
            reason = (f"the caller passed this very array again at call {b.passed_again}: "
                      "it keeps it (a constant, a batch it reuses), so it is not to be "
                      "donated; a donated array is deleted by the call.")
        elif i in chosen or i in blocked:
            o = outputs[chosen[i] if i in chosen else blocked[i]]
            what = "a copy of it" if o.fate == "copy_of_input" else "a new buffer"
            reason = (f"{o.path} has the same shape and dtype and is {what}; donating "
                      f"{b.path} lets {o.path} reuse its buffer and saves "
                      f"{format_bytes(b.bytes)}, if the caller does not read {b.path} "
                      "after the call.")
            beside = refs_beside.get(_argument(b.path)) if i in blocked else None
            if beside is not None:
                reason += (f" Its argument also holds the Ref {beside}, and jax.jit donates "
                           f"whole arguments: pass {b.path} apart from the Ref to donate it "
                           "(memscope does not advise donating a Ref).")
        result.append(replace(b, candidate=i in chosen, reason=reason,
                              candidate_for=outputs[chosen[i]].path if i in chosen
                              else None))
    return tuple(result)


def ref_collisions(program: Program, donated: Sequence[bool]) -> dict[int, str]:
    """The donated leaves JAX would alias to a ``jax.Ref``'s new value: ``{input:
    Ref path}``; XLA refuses such a program (it would alias that result twice).

    JAX (0.7 to 0.10, ``mlir._set_up_aliases``) walks ``main``'s results in order,
    each taking the first donated argument left with its shape and dtype, and
    does not skip a Ref's new value, already aliased to the Ref itself. So an
    argument donated beside a Ref of its aval, with no output of the function
    left to take it, collides.
    """
    ref_of_result: dict[int, tuple[str, tuple[int, ...], str]] = {}
    closed = dict(zip(program.closed_ref_args, program.closed_refs, strict=False))
    for arg, result in enumerate(program.requested_alias):
        inp = program.arg_inputs[arg] if arg < len(program.arg_inputs) else None
        leaf = (program.inputs[inp] if inp is not None and program.ref_access(inp) is not None
                else closed.get(arg))
        if result is not None and leaf is not None:
            ref_of_result[result] = (leaf.path, _leaf_shape(leaf), leaf.dtype)
    if not ref_of_result:
        return {}
    kept = {inp for inp in program.arg_inputs if inp is not None}
    queue: dict[Aval, deque[int]] = defaultdict(deque)
    for i, leaf in enumerate(program.inputs):
        if i < len(donated) and donated[i] and i in kept and program.ref_access(i) is None:
            queue[(_leaf_shape(leaf), leaf.dtype)].append(i)
    collisions: dict[int, str] = {}
    for result, out in enumerate(program.result_outputs):
        if out is not None:
            aval = (_leaf_shape(program.outputs[out]), program.outputs[out].dtype)
        elif result in ref_of_result:
            aval = ref_of_result[result][1:]
        else:
            continue  # an effect token
        waiting = queue.get(aval)
        if waiting:
            i = waiting.popleft()
            if out is None:
                collisions[i] = ref_of_result[result][0]
    return collisions


def _leaf_shape(leaf: Leaf) -> tuple[int, ...]:
    return leaf.shard_shape if leaf.shard_shape is not None else leaf.shape


def _argument(path: str) -> str:
    """The top-level argument of a leaf path: ``state`` for ``state['w'].mu``."""
    match = re.match(r"[^.\[]*", path)
    return match.group(0) if match else path


def _ref_reason(b: InputBuffer) -> str | None:
    """Only a donated Ref needs words: donation does nothing for it."""
    if not b.donated:
        return None
    return (f"{b.path} is a jax.Ref: JAX already writes its new value into its own buffer, "
            "so donating it saves nothing (JAX may warn it \"not usable\", and donating a "
            "Ref that an output could take fails to compile). Leave it out of the "
            "donation.")


def _donor_reason(b: InputBuffer, i: int, pairing: _Pairing,
                  outputs: Sequence[OutputBuffer]) -> str:
    if b.output is not None:
        used = f"XLA used it for {b.output}."
    else:
        used = "XLA did not use it, so it stays allocated."
    if i in pairing.same_aval:
        o = outputs[pairing.same_aval[i]]
        fix = ("Nothing to change; to make the alias fixed, give the function out_shardings "
               "that match this input." if b.output else
               "Give the function out_shardings that match this input so JAX can fix the "
               "alias, or stop donating it.")
        return (f"JAX matched it with {o.path} (same shape and dtype) but left the alias to "
                "XLA, because that output's sharding is left to the compiler or its layout "
                f"differs. {used} {fix}")
    if i in pairing.same_size:
        o = outputs[pairing.same_size[i]]
        fix = (f"Nothing to change; returning a {_aval_text(b)} output would make the "
               "alias fixed." if b.output else
               f"Return a {_aval_text(b)} output that can reuse it, or stop donating "
               f"{b.path}.")
        return (f"No output of its shape and dtype was left, but {o.path} "
                f"({_aval_text(o)}) has the same element count, so JAX offered it to XLA "
                f"as an optional donor. {used} {fix}")
    fix = "Nothing to change." if b.output else f"Stop donating {b.path}."
    return ("JAX offered every donation to XLA as an optional donor, as it does when output "
            f"shardings are left to the compiler. {used} {fix}")


def _unusable_reason(b: InputBuffer, i: int, pairing: _Pairing,
                     inputs: Sequence[InputBuffer], outputs: Sequence[OutputBuffer], *,
                     same_size_donors: bool = True) -> str:
    aval = _aval(b)
    same = [j for j, o in enumerate(outputs) if _aval(o) == aval]
    if i in pairing.same_aval or i in pairing.same_size:
        o = outputs[pairing.same_aval.get(i, pairing.same_size.get(i, 0))]
        return (f"{o.path} could take it by shape and element count, but JAX would not "
                "pair them: their memory kinds differ. Put the input and the output in the "
                "same memory kind (out_shardings with the input's memory_kind), or stop "
                f"donating {b.path}.")
    resharded = [o for o in outputs if (o.shape, o.dtype) == (b.shape, b.dtype)
                 and _local_shape(o) != _local_shape(b)]
    if not same and resharded:
        o = resharded[0]
        return (f"{o.path} is {_aval_text(o)} too, but sharded differently ({o.sharding} "
                f"vs {b.sharding}): JAX pairs the shards each device holds, "
                f"{list(_local_shape(o))} against {list(_local_shape(b))}. Give the output "
                f"the input's sharding (out_shardings), or stop donating {b.path}.")
    if same:
        takers = {j: k for k, j in pairing.same_aval.items()}
        taken = bounded([f"{outputs[j].path} <- {inputs[takers[j]].path}"
                         for j in same if j in takers])
        return (f"Every output of {_aval_text(b)} is already written into an earlier "
                f"donated argument ({taken}). Return an updated {b.path} too, or donate "
                f"only as many {_aval_text(b)} arguments as the function returns.")
    size = math.prod(_local_shape(b))
    same_size = [o.path for o in outputs if math.prod(_local_shape(o)) == size]
    if same_size and not same_size_donors:
        return (f"No output is {_aval_text(b)}. {bounded_leaves(same_size)} "
                f"{'has' if len(same_size) == 1 else 'have'} its {size} elements, but this "
                "JAX (before 0.8) pairs donations only by shape and dtype. Stop donating "
                f"{b.path}, or return its updated value.")
    if same_size:
        return (f"No output is {_aval_text(b)}, and the outputs with its {size} elements "
                f"({bounded_leaves(same_size, 2)}) are taken by other donated arguments. Stop "
                f"donating {b.path}, or return its updated value.")
    return (f"No output is {_aval_text(b)} or has its {size} elements, so its buffer "
            f"cannot be reused. Stop donating {b.path} (the function does not return a "
            "new value for it), or return its updated value.")
