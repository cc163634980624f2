"""What happens between calls: compile time and donated buffers.

Two recorders a capture keeps beside its entries (see :mod:`memscope.capturing`;
live arrays over the run are :mod:`memscope.capturing.residency`'s):

* :class:`CompileClock` adds up JAX's own monitoring events (tracing, lowering,
  XLA compile) that fire in the thread making a signature's first call.
* :class:`DonationLedger` keeps, for the last :data:`LEDGER_CALLS` calls of
  donating signatures, the ids of the leaves they donated and the user's line
  that made the call: a later "Array has been deleted" error is traced back to
  the call that donated the array. At a donating signature's first call it
  also names one buffer donated twice, or donated and passed again.
"""

from __future__ import annotations

import collections
import sys
import threading
import types
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import jax

from memscope import _compat
from memscope.analysis.recompiles import LeafShape, SignatureShape
from memscope.capturing.keys import JitSpec
from memscope.compiled.read import array_names
from memscope.errors import described
from memscope.program import sites
from memscope.report import DonationHazard, HazardKind

#: JAX's monitoring events that make up the cost of compiling one signature.
COMPILE_EVENTS = frozenset({"/jax/core/compile/jaxpr_trace_duration",
                            "/jax/core/compile/jaxpr_to_mlir_module_duration",
                            "/jax/core/compile/backend_compile_duration"})
#: Donating calls remembered for naming a deleted array.
LEDGER_CALLS = 256


class CompileClock:
    """Seconds of JAX's compile events in the thread between :meth:`start` and
    :meth:`stop` (memscope's own compiles run in other threads)."""

    def __init__(self) -> None:
        self._local = threading.local()
        self._installed = False

    def install(self) -> None:
        jax.monitoring.register_event_duration_secs_listener(self._listen)
        self._installed = True

    def remove(self) -> None:
        if self._installed:
            _compat.hooks.remove_duration_listener(self._listen)
            self._installed = False

    def _listen(self, event: str, duration_secs: float, **kwargs: Any) -> None:
        total = getattr(self._local, "total", None)
        if total is not None and event in COMPILE_EVENTS:
            self._local.total = total + duration_secs

    def start(self) -> None:
        self._local.total = 0.0

    def stop(self) -> float | None:
        """The seconds since :meth:`start`; ``None`` where no listener was installed."""
        total, self._local.total = getattr(self._local, "total", None), None
        return total if self._installed else None


@dataclass(frozen=True)
class Donated:
    """One call of a donating signature: the ids of the leaves it donated."""

    entry: Any
    call: int
    line: str | None
    #: (id of the leaf's array, its flat leaf index)
    leaves: tuple[tuple[int, int], ...]


@dataclass(frozen=True)
class DeletedFound:
    """The donating call behind a deleted-array error."""

    error: str
    donated: Donated
    leaf: int


class DonationLedger:
    """The recent donating calls, and what was found about donations (see the module)."""

    def __init__(self) -> None:
        self._recent: collections.deque[Donated] = collections.deque(maxlen=LEDGER_CALLS)
        self.hazards: list[DonationHazard] = []
        self.deleted: DeletedFound | None = None

    def record(self, entry: Any, call: int, leaves: Sequence[Any], donated: Sequence[int]
               ) -> None:
        """Remember which leaves call number ``call`` of ``entry`` donates."""
        self._recent.append(Donated(entry, call, caller_line(),
                                    tuple((id(leaves[i]), i) for i in donated)))

    def check(self, function: str, source: str | None, call: int, leaves: Sequence[Any],
              addresses: Sequence[Any], donated: Sequence[int], paths: Callable[[], list[str]]
              ) -> None:
        """Name each donated leaf whose buffer is another leaf's too."""
        chosen = set(donated)
        by_buffer: dict[Any, int] = {}
        pairs: list[tuple[int, int]] = []
        for i, x in enumerate(leaves):
            if not isinstance(x, jax.Array):
                continue
            marks = [("id", id(x))]
            if addresses[i]:
                marks.append(("at", addresses[i]))
            for mark in marks:
                j = by_buffer.setdefault(mark, i)
                if j != i and (i in chosen or j in chosen):
                    pairs.append((j, i))
                    break
        if not pairs:
            return
        names = paths()
        line = caller_line()
        for j, i in pairs:
            kind: HazardKind = ("donated_twice" if i in chosen and j in chosen
                                else "donated_and_passed")
            self.hazards.append(DonationHazard(kind, function, source, call, line,
                                       (names[j], names[i])))

    def explain(self, error: BaseException) -> None:
        """If ``error`` is JAX's deleted-array error, find the call that donated it."""
        text = described(error, whole=False)
        if not any(marker in text for marker in _DELETED_MARKERS) or not self._recent:
            return
        donors = {leaf_id: (donated, leaf) for donated in self._recent
                  for leaf_id, leaf in donated.leaves}
        for value in _deleted_arrays(error):
            found = donors.get(id(value))
            if found is not None:
                self.deleted = DeletedFound(text, *found)
                return


#: How JAX's errors say an array passed to a call was deleted: "Array has been
#: deleted" (XLA:CPU), and on XLA:GPU (seen on an H100, jax 0.10.2) "Invalid buffer
#: passed to Execute() ... Donation requested for invalid buffer". The arrays the
#: failing frames hold are then checked with ``is_deleted()``.
_DELETED_MARKERS = ("deleted", "Donation requested for invalid buffer",
                    "Invalid buffer passed to Execute()")


def _deleted_arrays(error: BaseException) -> list[Any]:
    """The deleted arrays the failing frames hold (innermost first), inside pytrees too."""
    found: list[Any] = []
    seen: set[int] = set()
    chain: BaseException | None = error
    for _ in range(3):
        if chain is None:
            break
        frames: list[types.FrameType] = []
        tb = chain.__traceback__
        while tb is not None:
            frames.append(tb.tb_frame)
            tb = tb.tb_next
        for frame in reversed(frames):
            for value in list(frame.f_locals.values()):
                for x in _leaves(value):
                    if (isinstance(x, jax.Array) and not _compat.values.is_tracer(x)
                            and id(x) not in seen and x.is_deleted()):
                        seen.add(id(x))
                        found.append(x)
        chain = chain.__cause__ or chain.__context__
    return found


def _leaves(value: Any) -> list[Any]:
    """``value``'s pytree leaves (a module, a function: itself); at most 100,000."""
    if isinstance(value, types.ModuleType | types.FunctionType | type):
        return [value]
    try:
        return jax.tree_util.tree_leaves(value)[:100_000]
    except Exception:  # a pytree whose flattening fails: only itself
        return [value]


def caller_line() -> str | None:
    """``path:line`` of the innermost frame of the user's code
    (:func:`memscope.program.sites.is_users`)."""
    for frame in sites.user_frames(sys._getframe(1)):
        return f"{frame.f_code.co_filename}:{frame.f_lineno}"
    return None


def donated_leaves(arguments: Sequence[Any], spec: JitSpec) -> tuple[int, ...]:
    """The flat leaves that ``spec`` donates, of a call's JAX-level ``arguments``."""
    return tuple(leaf for a in arguments
                 if (a.position is not None and a.position in spec.donate_argnums)
                 or (a.name is not None and a.by_name and a.name in spec.donate_argnames)
                 for leaf in a.leaves)


def leaf_paths(arguments: Sequence[Any], values: Sequence[Any]) -> list[str]:
    """Each flat leaf's path: its argument's label and the path within; each
    array of a hijax value's as the compiled program's leaves name it."""
    paths: list[str] = []
    for argument, value in zip(arguments, values, strict=True):
        flat, _ = jax.tree_util.tree_flatten_with_path(value)
        for p, leaf in flat:
            path = argument.label + jax.tree_util.keystr(p)
            hijax = _compat.values.hijax_value(leaf)
            paths += [path] if hijax is None else array_names(hijax, path)
    return paths


def signature_shape(key: Any, paths: Sequence[str] | None, shardings: Sequence[str | None],
                    donation: str) -> SignatureShape:
    """A signature's key (:func:`memscope.capturing.keys.call_key`) as a :class:`SignatureShape`;
    ``paths`` name the leaves (``None``: JAX's flat positions)."""
    positional, named, treedef, leaf_keys = key
    leaves = []
    for i, (kind, aval, placement) in enumerate(leaf_keys):
        name = kind if isinstance(kind, str) else getattr(kind, "__name__", str(kind))
        if name == "numpy":
            name = "numpy array"
        elif name == "ref":
            name = "Ref"
        shape = tuple(aval.shape) if aval is not None and hasattr(aval, "shape") else None
        dtype = str(aval.dtype) if aval is not None and hasattr(aval, "dtype") else None
        leaves.append(LeafShape(
            path=paths[i] if paths is not None and i < len(paths) else f"leaf {i}",
            kind=name, shape=shape, dtype=dtype,
            weak_type=bool(getattr(aval, "weak_type", False)),
            placement=placement,
            sharding=shardings[i] if i < len(shardings) else None))
    statics = tuple([(f"#{i}", s.name()) for i, s in positional]
                    + [(k, s.name()) for k, s in named])
    return SignatureShape(tuple(leaves), statics, str(treedef.treedef), donation)
