"""What each buffer live at a peak is: parameters, optimizer state, the batch,
gradients, activations saved for the backward pass, collectives' buffers, and
what cannot be told (docs/roles.md).

Decided from what memscope knows exactly, in this order:

* an argument's role from the framework's own types (``hints``, read from
  the call's pytree by :func:`memscope._frameworks.type_role`: optax's states,
  Flax NNX's ``Param`` and optimizer variables, Equinox modules), else from the
  user's argument names and leaf paths (``opt_state``, ``.mu``: optimizer;
  ``params``, ``model``: parameters); an argument the call
  gives back (a result of the same structure, shapes and dtypes, or its own
  donated buffer written in place) is state, one that is not is the batch;
* a result's role from the argument it gives back (the new parameters are
  parameters), gradients where the backward pass defines it;
* a temporary's from the JAX op name of the instruction that made it
  (``transpose(jvp(...))``: the backward pass; ``jvp(...)``: the forward) and
  of the ones that read it: a forward value the backward pass reads is an
  activation saved for it, a backward value read outside it (by the optimizer)
  a gradient; a collective's by its opcode.

Nothing is guessed into a role: what none of these tells is ``unknown``.
Pure functions on report records; no JAX here.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable, Mapping, Sequence

from memscope.compiled.program import WRITTEN_BACK
from memscope.report import InputBuffer, LiveBuffer, OutputBuffer, PeakPart, Role, RoleBytes

#: Path words that name an optimizer's state (optax's fields among them), the
#: model's other state, and its parameters; matched whole, case-insensitively.
OPTIMIZER_WORDS = frozenset({
    "opt_state", "opt_states", "optimizer", "optimizer_state", "opt", "optim",
    "mu", "nu", "momentum", "trace", "ema", "exp_avg", "exp_avg_sq", "inner_state",
    "hyperparams", "gradient_step", "mini_step", "acc_grads"})
MODEL_STATE_WORDS = frozenset({"batch_stats", "cache", "rngs", "rng", "rng_state"})
PARAMETER_WORDS = frozenset({"params", "param", "parameters", "weights", "weight", "model",
                             "variables", "net", "network", "w", "ws", "theta", "kernel",
                             "bias", "embedding", "embed", "layers"})
#: Leaf names too short to tell alone (``b`` may be a batch): parameters only in
#: state the call gives back (a layer's ``{"w": ..., "b": ...}``).
STATE_PARAMETER_WORDS = frozenset({"b", "scale"})
#: HLO opcodes and JAX primitives of collectives.
COLLECTIVES = frozenset({
    "all-gather", "all-gather-start", "all-gather-done", "all-reduce", "all-reduce-start",
    "all-reduce-done", "reduce-scatter", "all-to-all", "collective-permute",
    "collective-permute-start", "collective-permute-done", "collective-broadcast",
    "ragged-all-to-all", "all_gather", "psum", "pmax", "pmin", "reduce_scatter",
    "psum_scatter", "all_to_all", "ppermute", "pbroadcast"})

#: The roles a framework's types can say.
_TYPED = frozenset({"parameters", "optimizer", "model_state"})
_TOKEN = re.compile(r"\.([A-Za-z_]\w*)|\[('(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\"|[^\]]*)\]")
_LABEL = re.compile(r"^[^.\[]*")

#: A leaf's place, token by token: its label (``params``) and then each step.
Tokens = tuple[str, ...]
#: What pairs a result with an argument: the leaf's path below the subtree, its
#: shape and dtype.
_Leaf = tuple[Tokens, tuple[int, ...], str]


@functools.lru_cache(maxsize=1 << 14)
def tokens(path: str) -> Tokens:
    """``params['layers'][0].w`` as ``('params', "'layers'", '0', 'w')``."""
    label = _LABEL.match(path)
    head = label.group(0) if label else ""
    steps = tuple(m.group(1) or m.group(2) for m in _TOKEN.finditer(path, len(head)))
    return (head, *steps)


def _word(token: str) -> str:
    return token.strip("'\"").lower()


def argument_roles(inputs: Sequence[InputBuffer], outputs: Sequence[OutputBuffer],
                   paired: Mapping[int, str] | None = None,
                   hints: Mapping[str, str] | None = None) -> dict[str, Role]:
    """Each input leaf's role: the one its framework's types say (``hints``,
    by path), else by its path's words; ``paired`` is :func:`paired_results`
    of the same leaves, where already found."""
    if paired is None:
        paired = paired_results(inputs, outputs)
    state = set(paired.values())
    state |= {b.path for b in inputs if b.fate == "aliased"}
    roles: dict[str, Role] = {}
    for b in inputs:
        hint = (hints or {}).get(b.path)
        roles[b.path] = (hint if hint in _TYPED  # type: ignore[assignment]
                         else _by_words(b.path, b.path in state))
    return roles


def _by_words(path: str, is_state: bool) -> Role:
    words = {_word(t) for t in tokens(path)}
    if words & OPTIMIZER_WORDS:
        return "optimizer"
    if words & MODEL_STATE_WORDS:
        return "model_state"
    if words & PARAMETER_WORDS or (is_state and words & STATE_PARAMETER_WORDS):
        return "parameters"
    # State the call gives back whose name says nothing: parameters or the
    # optimizer's, memscope cannot tell; an argument it does not give back is input.
    return "unknown" if is_state else "batch"


def paired_results(inputs: Sequence[InputBuffer], outputs: Sequence[OutputBuffer]
                   ) -> dict[int, str]:
    """Result index -> the input leaf it gives back.

    A Flax NNX step's written-back leaf is its input's, by name. Otherwise a
    subtree of the results (``result[0]``) gives back a subtree of the
    arguments (``params``, or ``state.params``) when both hold the same leaves
    below them: the same paths, shapes and dtypes (a train step returning its
    new parameters and optimizer state). The shallowest match wins.
    """
    by_path = {b.path: b for b in inputs}
    paired: dict[int, str] = {}
    for j, out in enumerate(outputs):
        if out.path.endswith(WRITTEN_BACK) and out.path[:-len(WRITTEN_BACK)] in by_path:
            paired[j] = out.path[:-len(WRITTEN_BACK)]
    # per argument subtree (its leaves below it): each leaf's path, by the path below
    subtrees: dict[frozenset[_Leaf], dict[Tokens, str]] = {}
    for depth in (1, 2):
        for leaves in _subtrees(((tokens(b.path), b.shape, b.dtype, b.path)
                                 for b in inputs), depth).values():
            if len(leaves) > 1:  # one array alone could be any same-shaped result
                subtrees.setdefault(frozenset(leaves),
                                    {below: path for (below, _, _), path in leaves.items()})
    rest = [(j, out) for j, out in enumerate(outputs) if j not in paired]
    for depth in (1, 2, 3):
        groups = _subtrees(((tokens(out.path), out.shape, out.dtype, str(j))
                            for j, out in rest if j not in paired), depth)
        for leaves in groups.values():
            paths = subtrees.get(frozenset(leaves))
            if paths is None:
                continue
            for (below, _, _), index in leaves.items():
                paired[int(index)] = paths[below]
    return paired


def _subtrees(leaves: Iterable[tuple[Tokens, tuple[int, ...], str, str]], depth: int
              ) -> dict[Tokens, dict[_Leaf, str]]:
    """The leaves grouped by their first ``depth`` tokens: per subtree, each
    leaf's (path below it, shape, dtype) -> its name."""
    found: dict[Tokens, dict[_Leaf, str]] = {}
    for toks, shape, dtype, name in leaves:
        if len(toks) >= depth:
            found.setdefault(toks[:depth], {})[(toks[depth:], tuple(shape), dtype)] = name
    return found


def is_backward(op_name: str) -> bool:
    """An op of a backward pass: JAX names it ``transpose(jvp(...))``."""
    return "transpose(" in op_name


def is_forward(op_name: str) -> bool:
    """An op of a forward pass being differentiated (``jvp(...)``, not transposed)."""
    return "jvp(" in op_name and not is_backward(op_name)


def _named(op: str) -> bool:
    """An op name JAX gave (``jit(f)/...``), not a bare HLO opcode."""
    return "/" in op or "(" in op


def temporary_role(buffer: LiveBuffer, defined: int, readers: Sequence[int],
                   step_ops: Sequence[str], backward_from: int | None) -> Role:
    """The role of a temporary live at the peak, defined at flattened step
    ``defined`` and read at ``readers``, from its op and its readers' ops
    (``step_ops``: each step's JAX op name, or the opcode of an instruction
    XLA made, which JAX did not name); the backward pass begins at
    ``backward_from`` (:func:`backward_start`)."""
    if buffer.opcode in COLLECTIVES or buffer.op in COLLECTIVES:
        return "collectives"
    ops = [step_ops[t] for t in readers if t < len(step_ops)]
    optimizer_reads = any(_named(op) and not is_backward(op) and not is_forward(op)
                          for op in ops)
    if not buffer.op_name:
        return _made_by_xla(defined, ops, optimizer_reads, backward_from)
    if is_backward(buffer.op_name):
        return "gradients" if optimizer_reads else "temporaries"
    if is_forward(buffer.op_name):
        # Read by the backward pass: by an op of it, or by one XLA made that
        # runs once the backward pass has begun.
        late = backward_from is not None and any(
            is_backward(step_ops[t]) or (not _named(step_ops[t]) and t >= backward_from)
            for t in readers if t < len(step_ops))
        if late:
            return "activations"
    return "temporaries"


def _made_by_xla(defined: int, readers: Sequence[str], optimizer_reads: bool,
                 backward_from: int | None) -> Role:
    """The role of a value XLA made without a JAX op name (a copy or a
    broadcast it inserted, for a loop's state say): by where it is made and
    what reads it. Made before the backward pass and read by it: kept for it
    (an activation); made in the backward pass and read by the optimizer: a
    gradient, read only by the backward pass: a temporary of it. Otherwise
    it cannot be told."""
    backward_reads = any(is_backward(op) for op in readers)
    if backward_from is None or not any(_named(op) for op in readers):
        return "unknown"
    if defined < backward_from:
        return "activations" if backward_reads else "unknown"
    if optimizer_reads:
        return "gradients"
    return "temporaries" if backward_reads else "unknown"


def backward_start(step_ops: Sequence[str]) -> int | None:
    """The first flattened step of the backward pass; ``None``: there is none."""
    return next((t for t, op in enumerate(step_ops) if is_backward(op)), None)


def output_role(buffer: LiveBuffer, given_back: Role | None, path: str | None = None
                ) -> Role:
    """The role of a result's buffer: gradients where the backward pass made
    it, else the role of the argument it gives back, unless the result's own
    path says it is an optimizer's or the model's state (``init`` returning
    Adam's ``mu``, shaped as the parameters it pairs with), else an output."""
    if buffer.op_name and is_backward(buffer.op_name):
        return "gradients"
    if path is not None:
        said = _by_words(path, True)
        if said in ("optimizer", "model_state"):
            return said
    return given_back if given_back is not None else "outputs"


def summed(buffers: Sequence[LiveBuffer]) -> tuple[tuple[RoleBytes, ...], tuple[PeakPart, ...]]:
    """The bytes by role and by (role, where, op) of ``buffers`` (each with its
    role set), largest first: each adds up to all of them."""
    roles: dict[Role, list[int]] = {}
    parts: dict[tuple[Role, str | None, str], list] = {}
    for b in buffers:
        role: Role = b.role or "unknown"
        r = roles.setdefault(role, [0, 0])
        r[0] += b.bytes
        r[1] += 1
        argument = b.kind in ("parameter", "aliased")
        where = b.argument if argument else b.source
        p = parts.setdefault((role, where, "argument" if argument else b.op), [0, 0, "", 0])
        p[0] += b.bytes
        p[1] += 1
        if b.bytes > p[3]:
            p[2], p[3] = b.shape, b.bytes
    return (tuple(RoleBytes(role, n, count) for role, (n, count)
                  in sorted(roles.items(), key=lambda kv: -kv[1][0])),
            tuple(PeakPart(role, where, op, n, count, shape)
                  for (role, where, op), (n, count, shape, _)
                  in sorted(parts.items(), key=lambda kv: (-kv[1][0], str(kv[0])))))

