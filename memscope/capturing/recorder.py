"""``capture()``: record every jitted function called inside a block.

Inside it, every jit object JAX makes is handed back inside a
:class:`~memscope.capturing.jit.MeasuredJit`, recording into one
:class:`~memscope.capturing.session.Session`.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import threading
from collections.abc import Callable, Iterator
from typing import Any

from memscope import _compat, _versions
from memscope.analysis.advice import AdviceLevel
from memscope.capturing.calls import is_jax_internal
from memscope.capturing.jit import MeasuredJit
from memscope.capturing.session import Session
from memscope.compiled.targets.base import Target
from memscope.errors import MemscopeError
from memscope.progress import SILENT, Reporter
from memscope.variants.donation import VariantRequest

_log = logging.getLogger("memscope")
# The line that says this JAX's figures are unverified, said once per process (by
# the CLI, or by the first capture()): memscope._versions keeps that memory.
unverified_jax_once = _versions.unverified_once
unverified_jax_said = _versions.unverified_said


@contextlib.contextmanager
def capture(*, advise: bool | AdviceLevel = False, request: VariantRequest | None = None,
            stop_after: int | None = None, keep_calls: bool = False,
            stop_at_repeat: bool | str = False, stop_at_function: str | None = None,
            remat_flops: float | None = None, target: Target | None = None,
            progress: Reporter = SILENT) -> Iterator[Session]:
    """Record every function jitted inside the block when it is called there.

    A jit object made before the block is not recorded (JAX made it without
    memscope's hook): measure it with :func:`memscope.analyze`, or make it
    inside the block.

    ``advise`` also compiles each signature with other donations: ``"advised"``
    the advisor's donation, ``"full"`` (or ``True``) also no donation and every
    array argument donated; ``"off"`` (or ``False``) none. Each distinct
    donation is one XLA compile, made in memscope's worker thread while the
    program goes on. ``request`` compiles the donation a ``memscope diff`` asked
    for. With advice on and ``remat_flops`` given (a fraction, e.g.
    :data:`memscope.variants.remat.DEFAULT_MAX_FLOPS_INCREASE`), each function that
    differentiates is also traced again to list its residuals and compiled
    under each ``jax.checkpoint`` policy (:mod:`memscope.variants.remat`); the policy
    advised saves the most peak within ``remat_flops`` more FLOPs. ``None``
    (the default) skips this: it costs about one compile per policy.
    ``stop_after`` ends the block's code with
    :class:`~memscope.errors.ProgramStopped` once that many jitted calls ran;
    ``stop_at_repeat`` at the first call of a signature called before (a loop
    has begun); given a function's name, at the first such call of that
    function (an evaluation loop before the training loop does not stop it).
    ``stop_at_function`` ends it once the function of that name has run (and
    been compiled: ``memscope bisect --function``).
    ``progress`` hears where the compiles the report waits for stand, while it
    waits once the block's code has ended (:meth:`Session.wait`).
    ``keep_calls`` keeps each signature's call in shapes (:class:`KeptCall`),
    to compile it again (``memscope fit``). ``target`` (a
    :class:`memscope.compiled.targets.Target`; by default this machine) is what
    every function, and its variants, are compiled for: given an accelerator
    (``--target``), the functions' figures are its.

    Reading the compiled programs and the variants' compiles finish before the
    block exits. Jit objects made inside the block stay usable after it; they
    just stop recording.

    On a JAX series newer than those memscope is verified on, it runs and logs
    one warning (logger ``memscope``), once per process, that the figures are
    unverified; the report's ``notes`` say so too (docs/versions.md).

    Raises:
        MemscopeError: the JAX is older than memscope supports (unless
            ``MEMSCOPE_ALLOW_UNSUPPORTED_JAX=1``), or lacks a private attribute
            capturing reads on the program's path; the block does not run.
    """
    _refuse_what_cannot_run(stop_after)
    with _compat.hooks.lowering_warnings(_WarningsProxy) as proxy:
        session = Session(proxy, advise=advise, request=request, stop_after=stop_after,
                          remat_flops=remat_flops,
                          target=target)
        with contextlib.suppress(Exception):  # compile times are then n/a
            session.clock.install()
        session.keep_calls, session.stop_at_repeat = keep_calls, stop_at_repeat
        session.stop_at_function = stop_at_function
        session.progress = progress

        def uncaptured_pmap() -> None:
            session.uncaptured_pmaps += 1

        try:
            with (_compat.hooks.patched_make_jit(functools.partial(_stand_in_for_jit, session)),
                  _compat.hooks.pmap_outside_jit(uncaptured_pmap),
                  _compat.hooks.patched_eval_shape(_jitted_of)):
                yield session
        finally:
            session.active = False
            session.clock.remove()
            session.finish()
            # Before the warnings proxy goes: the variants' lowerings record through it.
            session.wait()


def _refuse_what_cannot_run(stop_after: int | None) -> None:
    """Raise :class:`MemscopeError` before the block runs where it cannot be
    captured; log the one warning of an unverified JAX."""
    if stop_after is not None and stop_after < 1:
        raise MemscopeError(f"stop_after must be at least 1, got {stop_after}")
    unsupported = _compat.support_problem()
    if unsupported is not None and not _compat.unsupported_allowed():
        raise MemscopeError(unsupported)
    cannot = _compat.hooks.capture_problem()
    if cannot is not None:
        raise MemscopeError(cannot)
    # A logged line, not a Python warning: suites that run with warnings as
    # errors would otherwise fail every measured test on a newer JAX.
    unverified = unverified_jax_once()
    if unverified is not None:
        _log.warning("memscope: warning: %s", unverified)


def _stand_in_for_jit(session: Session, jitted: Any, fun: Callable[..., Any],
              options: dict[str, Any]) -> Any:
    """What JAX's jit constructor hands back inside the capture: a stand-in
    recording into ``session``; JAX's own jit objects stay JAX's."""
    if not is_jax_internal(fun):
        return MeasuredJit(jitted, fun, session, options)
    # jax.pmap jits a function of its own around the user's: report it
    # under the user's name; its leaves keep pmap's flat names.
    user = _compat.hooks.pmap_user_function(fun)
    if user is None:
        return jitted
    return MeasuredJit(jitted, fun, session, options, named_after=user)


def _jitted_of(fun: Any) -> Any:
    """The jit object a stand-in stands for; anything else as it is."""
    return fun._memscope_jitted if type(fun) is MeasuredJit else fun


@contextlib.contextmanager
def measure_names(namespace: dict[str, Any], session: Session) -> Iterator[None]:
    """Inside the block, the jit objects that ``namespace`` holds by name and that
    were made before ``session``'s capture (an earlier notebook cell's
    ``train_step``) record into it too: each such name is bound to a stand-in
    (:class:`MeasuredJit`) for the block, and bound back to its own jit object
    afterwards, unless the block bound it to something else.

    A jit JAX made before the capture does not tell how its donation was
    spelled, nor its options: its advice names arguments, and it has no remat
    (as with :func:`memscope.analyze`). One held elsewhere (in an object, a
    closure, a module) records only if made inside the capture.
    """
    swapped: dict[str, tuple[Any, MeasuredJit]] = {}
    for name, value in list(namespace.items()):
        stand_in = _stand_in(value, session)
        if stand_in is not None:
            namespace[name] = stand_in
            swapped[name] = (value, stand_in)
    try:
        yield
    finally:
        for name, (value, stand_in) in swapped.items():
            if namespace.get(name) is stand_in:
                namespace[name] = value


def _stand_in(value: Any, session: Session) -> MeasuredJit | None:
    """A stand-in recording into ``session`` for the jit object ``value``, if it is one."""
    try:
        if isinstance(value, MeasuredJit):
            return None if value._memscope_calls.session is session else value.for_session(session)
        if not _compat.hooks.is_jit_object(value):
            return None
        fun = getattr(value, "__wrapped__", None)
        if fun is None or is_jax_internal(fun):
            return None
        return MeasuredJit(value, fun, session)
    except Exception:  # a value that answers oddly is not one memscope can measure
        return None


class _WarningsProxy:
    """Stands in for the ``warnings`` module inside JAX's MLIR lowering
    (:func:`memscope._compat.hooks.lowering_warnings`).

    JAX raises "Some donated buffers were not usable" from ``mlir.py`` while it
    lowers. The proxy lets the lowering thread record that text and then emits it
    through the real ``warnings.warn`` one frame up, so the user's filters, the
    warning's location and its once-per-location registry are exactly JAX's own.
    """

    def __init__(self, real: Any) -> None:
        self._real = real
        self._local = threading.local()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._real, name)

    def warn(self, message: Any, category: Any = None, stacklevel: int = 1,
             source: Any = None, **kwargs: Any) -> None:
        sink = getattr(self._local, "sink", None)
        if sink is not None:
            sink.append(str(message))
        if getattr(self._local, "emit", True):
            self._real.warn(message, category, stacklevel + 1, source, **kwargs)

    @contextlib.contextmanager
    def recording(self, *, emit: bool = True) -> Iterator[list[str]]:
        """Record the lowering's warnings; ``emit=False`` keeps them from the user
        (for memscope's own compiles of variants the program never runs)."""
        previous = getattr(self._local, "sink", None), getattr(self._local, "emit", True)
        sink: list[str] = []
        self._local.sink, self._local.emit = sink, emit
        try:
            yield sink
        finally:
            self._local.sink, self._local.emit = previous
