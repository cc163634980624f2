"""Memory over program order, from the compiled schedule: on every backend.

XLA records heap-simulator traces only on GPU and TPU. Yet every optimized
module carries what they are made of: its schedule (the order each sequential
computation runs in), and the buffer assignment (each logical buffer's defining
instruction, size, allocation and offset). This module replays that schedule
the way XLA's ``HloLiveRange`` does:

* the entry computation's sequence is flattened: the computations a ``while``,
  ``conditional`` or ``call`` runs are placed, in their own scheduled order,
  just before the instruction (fusion bodies and reducers are not sequential:
  their values are the fusion's own, or thread-local scratch);
* a buffer is live from its defining instruction to its last use; a use is an
  instruction that takes it as an operand, seen through the instructions that
  only forward it (``get-tuple-element``, ``tuple``, ``bitcast``: any that
  defines no buffer of its own), and through the parameters of the
  computations an instruction runs, which hold what it passes them where they
  define no buffer (a loop's state the body passes through unchanged); a
  buffer that reaches a computation's root lives into the step after it (its
  caller's); a ``while`` uses its initial state where its body's parameter
  takes over, and a ``call`` uses nothing itself (XLA's rules: XLA packs
  other buffers of the body into memory the initial state held);
* bytes live at a step are those of the device allocations held for the whole
  call (parameters, outputs, constants: the caller and the executable own
  them) plus the temporary buffers live then. Buffers XLA placed at the same
  offset and size of one allocation share their memory (an in-place update, a
  loop's carried value) and count once while any of them lives, in the curve
  and in the list of what is live at the peak alike.

Linear in the module: one pass to flatten, one over the operands, one over the
buffers, and the events bucketed by step. Pure functions on decoded protos;
no JAX here.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from memscope.compiled.buffers import Allocation, BufferAssignment

#: Opcodes whose called computations run in sequence, in place of the instruction.
_SEQUENTIAL_CALLERS = frozenset({"while", "conditional", "call", "async-start"})
#: Allocation kinds held for the whole call (see :func:`memscope.report.peak_rule`).
HELD_KINDS = frozenset({"parameter", "aliased", "output", "constant"})


@dataclass(frozen=True)
class LiveRange:
    """A temporary buffer and the flattened steps it lives over (both ends included).

    In :attr:`Liveness.live`, one per memory slot: the buffer the slot holds at
    the peak and the steps the slot stays held (:func:`_one_per_slot`).
    """

    buffer: int
    allocation: int
    offset: int
    size: int
    start: int
    end: int


@dataclass(frozen=True)
class Liveness:
    """Bytes live over the entry computation's program order.

    ``entry_bytes[i]`` is the most held while entry instruction ``i`` runs
    (with the computations it calls); ``entry_names[i]`` names it.
    ``peak_time`` is the flattened step of the peak, where ``peak_instruction``
    runs (inside a loop body, say) and ``peak_step`` its entry instruction.
    ``held`` are the allocations held for the whole call, ``live`` the
    temporary memory live at the peak, one range per slot (buffers sharing
    one count once), whose sizes add up to ``live_temp``; ``temp_block`` adds
    the temporary allocations, of which ``live_temp`` bytes hold live buffers
    at the peak.
    ``scheduled`` is false where the module carried no schedule and the
    entry's instruction order (a valid topological order) stood in for it.
    """

    entry_bytes: tuple[int, ...]
    entry_names: tuple[str, ...]
    peak_bytes: int
    peak_step: int
    peak_time: int
    peak_instruction: str
    held: tuple[Allocation, ...]
    held_bytes: int
    live: tuple[LiveRange, ...]
    live_temp: int
    temp_block: int
    steps: int
    scheduled: bool = True
    #: temporary buffers defined outside the flattened schedule (not counted)
    unplaced: int = 0
    #: per flattened step: its entry step and its instruction's name
    time_steps: tuple[int, ...] = ()
    time_names: tuple[str, ...] = ()
    temp_allocations: tuple[Allocation, ...] = ()
    #: per temporary buffer live at the peak: the flattened steps of the
    #: instructions that read it (seen through forwarding, as its range is,
    #: and through loops: what reads a loop's result reads the state its body
    #: fills, one buffer in XLA's aliasing)
    readers: Mapping[int, tuple[int, ...]] = field(default_factory=dict)
    #: per flattened step: its instruction's JAX op name, else its HLO opcode
    step_ops: tuple[str, ...] = ()
    #: per buffer the entry computation returns: the result (root tuple element) it is
    results: Mapping[int, int] = field(default_factory=dict)
    #: per temporary buffer live at the peak that holds a loop's state and was
    #: defined by an instruction JAX did not name (the body's parameter, XLA's
    #: copy of the initial state): the loop's own buffer, which names it
    loop_values: Mapping[int, int] = field(default_factory=dict)


class _Node:
    """The buffers an instruction's value holds: ``own`` at its shape index
    ``()``, ``children`` per tuple element."""

    __slots__ = ("children", "own")

    def __init__(self, own: int | None, children: list[_Node] | None = None) -> None:
        self.own = own
        self.children = children or []

    def buffers(self) -> Iterator[int]:
        stack = [self]
        while stack:
            node = stack.pop()
            if node.own is not None:
                yield node.own
            stack.extend(node.children)


def flatten(module: Any) -> tuple[list[Any], list[int], dict[int, tuple[int, int]], bool]:
    """The entry computation's schedule with called sequential computations in place.

    Returns (instructions in order, the entry step of each, each sequential
    computation's span of times, whether the module had a schedule).
    """
    comps = {c.id: c for c in module.computations}
    sequences = {e.key: list(e.value.instruction_ids) for e in module.schedule.sequences}
    scheduled = module.entry_computation_id in sequences
    order: list[Any] = []
    entry_step: list[int] = []
    spans: dict[int, tuple[int, int]] = {}

    def visit(comp_id: int, step: int | None) -> None:
        comp = comps[comp_id]
        by_id = {i.id: i for i in comp.instructions}
        ids = sequences.get(comp_id) or [i.id for i in comp.instructions]
        start = len(order)
        for n, iid in enumerate(ids):
            instr = by_id[iid]
            if instr.opcode in _SEQUENTIAL_CALLERS:
                called_ids = list(instr.called_computation_ids)
                if instr.opcode == "while":  # XLA keeps (body, condition); the condition runs first
                    called_ids.reverse()
                for called in called_ids:
                    if called in comps and called not in spans:
                        visit(called, n if step is None else step)
            order.append(instr)
            entry_step.append(n if step is None else step)
        spans[comp_id] = (start, len(order) - 1)

    visit(module.entry_computation_id, None)
    return order, entry_step, spans, scheduled


@dataclass
class _Ranges:
    """What :func:`live_ranges` finds: each buffer's (first, last) flattened
    step, the steps that read it, and the entry root's value."""

    ranges: dict[int, tuple[int, int]]
    reads: dict[int, list[int]]
    root: _Node | None
    #: per buffer a loop carries (:func:`_loop_state`): the loop's own buffer
    loops: dict[int, int] = field(default_factory=dict)


def live_ranges(module: Any, assignment: BufferAssignment, order: Sequence[Any],
                spans: Mapping[int, tuple[int, int]]) -> _Ranges:
    """Each logical buffer defined in ``order``: its (first, last) flattened
    step, and the steps of the instructions that read it."""
    defined: dict[int, dict[tuple[int, ...], int]] = {}
    for lb in assignment.buffers.values():
        defined.setdefault(lb.instruction_id, {})[lb.shape_index] = lb.id
    nodes: dict[int, _Node] = {}
    ranges: dict[int, list[int]] = {}
    roots = {c.id: c.root_id for c in module.computations if c.id in spans}
    passed, used_at = _calls(module, order, spans)
    reads: dict[int, list[int]] = {}
    for t, instr in enumerate(order):
        own = defined.get(instr.id, {})
        node, forwarding = _node(instr, own, nodes, roots, passed)
        nodes[instr.id] = node
        for b in own.values():
            ranges[b] = [t, t]
        if forwarding:  # its users use what it forwards
            if instr.opcode == "get-tuple-element" and instr.operand_ids:
                # It reads the tuple's index table (its own buffer), as XLA counts uses.
                table = nodes.get(instr.operand_ids[0])
                if table is not None and table.own in ranges:
                    ranges[table.own][1] = max(ranges[table.own][1], t)
            continue
        when = used_at.get(instr.id, t)
        if when is None:
            continue
        for operand in instr.operand_ids:
            if operand in nodes:
                for b in nodes[operand].buffers():
                    reads.setdefault(b, []).append(t)
                    if b in ranges and ranges[b][1] < when:
                        ranges[b][1] = when
    last = len(order) - 1
    for comp_id, (_, end) in spans.items():
        # XLA's span of a computation ends one step past its last instruction:
        # what reaches its root lives into the step that follows (its caller).
        end = min(end + 1, last)
        root = nodes.get(roots[comp_id])
        for b in root.buffers() if root is not None else ():
            if b in ranges and ranges[b][1] < end:
                ranges[b][1] = end
    return _Ranges({b: (r[0], r[1]) for b, r in ranges.items()}, reads,
                   nodes.get(roots.get(module.entry_computation_id, -1)),
                   _loop_state(module, order, spans, assignment, defined, nodes))


def _loop_state(module: Any, order: Sequence[Any], spans: Mapping[int, tuple[int, int]],
                assignment: BufferAssignment, defined: Mapping[int, Mapping[tuple[int, ...], int]],
                nodes: Mapping[int, _Node]) -> dict[int, int]:
    """Per buffer that holds a ``while`` loop's state, the loop's own buffer at
    the same tuple index: its body's and condition's parameter, what its body's
    root holds there, and its initial value where XLA placed that in the same
    memory (the copy it inserts). XLA's alias analysis makes them one buffer
    (``HloBuffer``): the state the body fills is the value the loop returns, so
    what reads the loop's result reads it too (a forward loop's stacked
    residuals, read by the backward loop)."""
    params = {(c.id, i.parameter_number): i.id for c in module.computations
              for i in c.instructions if i.opcode == "parameter"}
    roots = {c.id: c.root_id for c in module.computations}
    slot = {s.buffer: (a.index, s.offset, s.size) for a in assignment.allocations
            for s in a.slots}
    state: dict[int, int] = {}
    for instr in order:
        called = list(instr.called_computation_ids)
        if instr.opcode != "while" or not called or any(c not in spans for c in called):
            continue
        body_root = nodes.get(roots.get(called[0], -1))
        initial = nodes.get(instr.operand_ids[0]) if instr.operand_ids else None
        for index, loop in sorted(defined.get(instr.id, {}).items()):
            held = [defined.get(params.get((c, 0), -1), {}).get(index) for c in called]
            held.append(_at(body_root, index))
            first = _at(initial, index)
            if first is not None and slot.get(first) == slot.get(loop):
                held.append(first)
            for b in held:
                if b is not None and b != loop:
                    state.setdefault(b, loop)
    return state


def _at(node: _Node | None, index: tuple[int, ...]) -> int | None:
    """The buffer ``node``'s value holds at shape ``index``."""
    for i in index:
        if node is None or i >= len(node.children):
            return None
        node = node.children[i]
    return None if node is None else node.own


def _calls(module: Any, order: Sequence[Any], spans: Mapping[int, tuple[int, int]]
           ) -> tuple[dict[int, int], dict[int, int | None]]:
    """How values cross into the computations run in place of an instruction, as
    in XLA's dataflow and ``HloLiveRange``.

    Returns (per parameter of such a computation: the caller's operand it
    holds, where it defines no buffer of its own; per caller whose use of its
    operands is not at its own step: the step it uses them at, ``None`` for
    none). A ``while``'s body and condition take its operand, the loop's state,
    and the ``while`` uses it where its body's parameter takes over (XLA's
    rule: the body's state replaces it there, and XLA packs the body's
    temporaries into its memory); branch ``k`` of a ``conditional`` takes
    operand ``k + 1``; a ``call``'s computation takes its operands, and the
    ``call`` itself uses none (its computation's instructions use them).
    """
    params = {(c.id, i.parameter_number): i.id for c in module.computations
              for i in c.instructions if i.opcode == "parameter"}
    time = {instr.id: t for t, instr in enumerate(order)}
    passed: dict[int, int] = {}
    used_at: dict[int, int | None] = {}
    for instr in order:
        called, operands = list(instr.called_computation_ids), list(instr.operand_ids)
        if not called or any(c not in spans for c in called):
            continue
        if instr.opcode == "while":  # XLA keeps (body, condition)
            takes = [(c, 0, 0) for c in called]
            body = params.get((called[0], 0))
            if body in time:
                used_at[instr.id] = time[body]
        elif instr.opcode == "conditional":
            takes = [(c, 0, k + 1) for k, c in enumerate(called)]
        elif instr.opcode == "call":
            takes = [(called[0], n, n) for n in range(len(operands))]
            used_at[instr.id] = None
        else:
            continue
        for computation, number, operand in takes:
            param = params.get((computation, number))
            if param is not None and operand < len(operands):
                passed[param] = operands[operand]
    return passed, used_at


#: Opcodes that pass their operand's buffers on when they define none of their own.
_PASS_THROUGH = frozenset({"bitcast", "optimization-barrier", "domain", "add-dependency"})


def _node(instr: Any, own: Mapping[tuple[int, ...], int], nodes: Mapping[int, _Node],
          roots: Mapping[int, int], passed: Mapping[int, int]) -> tuple[_Node, bool]:
    """The buffers ``instr``'s value holds, and whether it only forwards its operands.

    Where XLA defined a buffer at a shape index, that buffer is there; any
    other index holds what the operand holds (a tuple's element, a
    get-tuple-element's source, a bitcast's operand); a parameter of a called
    computation holds what its caller passed (``passed``: a loop's state the
    body passes through unchanged is the initial value's buffer throughout),
    and a ``call`` or ``while`` what its (body) computation's root holds.
    """
    if instr.opcode == "parameter" and instr.id in passed:
        base = nodes.get(passed[instr.id]) or _Node(None)
        return (_overlay(base, own) if own else base), True
    if instr.opcode in ("call", "while") and instr.called_computation_ids:
        root = nodes.get(roots.get(instr.called_computation_ids[0], -1)) or _Node(None)
        return (_overlay(root, own) if own else root), False
    operands = [nodes.get(o) or _Node(None) for o in instr.operand_ids]
    if instr.opcode == "tuple":
        base, forwarding = _Node(None, operands), True
    elif instr.opcode == "get-tuple-element" and operands:
        children, index = operands[0].children, int(instr.tuple_index)
        base = children[index] if index < len(children) else _Node(None)
        forwarding = True
    elif not own and len(operands) >= 1 and instr.opcode in _PASS_THROUGH:
        base, forwarding = operands[0], True
    else:
        base, forwarding = _Node(None), False
    return (_overlay(base, own) if own else base), forwarding


def _overlay(base: _Node, own: Mapping[tuple[int, ...], int]) -> _Node:
    """``base`` with the buffers ``own`` defines put at their shape indices."""
    root = _Node(base.own, list(base.children))
    for index, b in sorted(own.items()):
        node = root
        for i in index:
            while len(node.children) <= i:
                node.children.append(_Node(None))
            child = node.children[i]
            node.children[i] = _Node(child.own, list(child.children))
            node = node.children[i]
        node.own = b
    return root


def schedule_liveness(module: Any, assignment: BufferAssignment) -> Liveness | None:
    """Bytes live over the entry computation's order of ``module`` (the decoded
    optimized ``HloModuleProto``) under its buffer ``assignment``; ``None`` for
    a module with no entry instructions."""
    order, entry_step, spans, scheduled = flatten(module)
    if not order:
        return None
    found = live_ranges(module, assignment, order, spans)
    ranges = found.ranges
    device = [a for a in assignment.allocations if a.color == 0]
    held = tuple(a for a in device if a.kind in HELD_KINDS)
    held_bytes = sum(a.size for a in held)
    temps = [a for a in device if a.kind == "temporary"]
    live_all, unplaced = [], 0
    for a in temps:
        for s in a.slots:
            r = ranges.get(s.buffer)
            if r is None:
                unplaced += 1
            else:
                live_all.append(LiveRange(s.buffer, a.index, s.offset, s.size, *r))
    sizes = _sweep(live_all, len(order))
    peak_time = max(range(len(sizes)), key=sizes.__getitem__)
    entry_bytes: list[int] = []
    entry_names: list[str] = []
    for t, step in enumerate(entry_step):
        if step == len(entry_bytes):
            entry_bytes.append(0)
            entry_names.append("")
        if step == len(entry_bytes) - 1 and sizes[t] >= entry_bytes[step]:
            entry_bytes[step] = sizes[t]
        entry_names[step] = order[t].name  # the entry instruction comes last
    live = tuple(sorted(_one_per_slot(r for r in live_all if r.start <= peak_time <= r.end),
                        key=lambda r: (-r.size, r.buffer)))
    live_temp = sizes[peak_time]
    return Liveness(
        entry_bytes=tuple(b + held_bytes for b in entry_bytes),
        entry_names=tuple(entry_names), peak_bytes=live_temp + held_bytes,
        peak_step=entry_step[peak_time], peak_time=peak_time,
        peak_instruction=order[peak_time].name, held=held, held_bytes=held_bytes,
        live=live, live_temp=live_temp, temp_block=sum(a.size for a in temps),
        steps=len(entry_bytes), scheduled=scheduled, unplaced=unplaced,
        time_steps=tuple(entry_step), time_names=tuple(i.name for i in order),
        temp_allocations=tuple(temps),
        readers=_readers(live, found), step_ops=tuple(i.metadata.op_name or i.opcode for i in order),
        results=_results(found.root), loop_values=_loop_values(live, found, assignment))


def _readers(live: Iterable[LiveRange], found: _Ranges) -> dict[int, tuple[int, ...]]:
    """The steps that read each of ``live``'s buffers, or the loop state it is
    one buffer with (:func:`_loop_state`, through nested loops too)."""
    together: dict[int, set[int]] = {}  # outermost loop's buffer -> the buffers one with it
    for b in found.loops:
        top = _outermost(b, found.loops)
        together.setdefault(top, {top}).add(b)
    return {r.buffer: tuple(sorted({t for b in together.get(_outermost(r.buffer, found.loops),
                                                             {r.buffer})
                                    for t in found.reads.get(b, ())}))
            for r in live}


def _outermost(b: int, loops: Mapping[int, int]) -> int:
    """The buffer of the outermost loop whose state ``b`` is (``b`` if none)."""
    seen = {b}
    while b in loops and loops[b] not in seen:
        b = loops[b]
        seen.add(b)
    return b


def _loop_values(live: Iterable[LiveRange], found: _Ranges, assignment: BufferAssignment
                 ) -> dict[int, int]:
    """Per live buffer that holds a loop's state and has no JAX op name: the
    nearest loop's own buffer."""
    return {r.buffer: found.loops[r.buffer] for r in live
            if r.buffer in found.loops and r.buffer in assignment.buffers
            and not assignment.buffers[r.buffer].op_name}


def _results(root: _Node | None) -> dict[int, int]:
    """Buffer -> the result (element of the entry's root tuple) holding it; a
    root that is not a tuple is result 0."""
    if root is None:
        return {}
    if not root.children:
        return {} if root.own is None else {root.own: 0}
    return {b: j for j, child in enumerate(root.children) for b in child.buffers()}


def _slot(r: LiveRange) -> tuple[int, int, int]:
    """The memory ``r``'s buffer occupies: buffers at the same one share it."""
    return r.allocation, r.offset, r.size


def _one_per_slot(ranges: Iterable[LiveRange]) -> list[LiveRange]:
    """``ranges`` live at one step, one per memory slot, as :func:`_sweep` counts
    them: named by the buffer defined last (what the memory holds then: an
    in-place update's result, the loop body's state), over the steps from the
    first one's definition to the last one's end (they all hold that step, so
    the memory stays held throughout)."""
    by_slot: dict[tuple[int, int, int], list[LiveRange]] = {}
    for r in ranges:
        by_slot.setdefault(_slot(r), []).append(r)
    return [LiveRange(max(rs, key=lambda r: (r.start, -r.buffer)).buffer, *key,
                      min(r.start for r in rs), max(r.end for r in rs))
            for key, rs in by_slot.items()]


def _sweep(ranges: Sequence[LiveRange], steps: int) -> list[int]:
    """Temporary bytes live at each step: buffers at the same offset and size
    of one allocation share that memory and count once while any lives."""
    starts: list[list[LiveRange]] = [[] for _ in range(steps)]
    ends: list[list[LiveRange]] = [[] for _ in range(steps)]
    for r in ranges:
        starts[r.start].append(r)
        ends[r.end].append(r)
    holders: dict[tuple[int, int, int], int] = {}
    live = 0
    sizes = []
    for t in range(steps):
        for r in starts[t]:
            key = _slot(r)
            holders[key] = holders.get(key, 0) + 1
            if holders[key] == 1:
                live += r.size
        sizes.append(live)
        for r in ends[t]:
            key = _slot(r)
            holders[key] -= 1
            if not holders[key]:
                live -= r.size
    return sizes
