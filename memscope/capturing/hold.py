"""What memscope's work off the program's path holds of the program, and for how long.

A first call's reading and its variants run later, in the worker
(:mod:`memscope.capturing.worker`). What they need of the program is held here,
per signature, and let go as soon as it can be:

* for the reading of the compiled program: JAX's executable and lowering, and
  a view of the traced program that holds none of the arrays the function closes
  over (:func:`memscope.compiled.held.reading_view`); let go once read;
* for the variants (donation settings, ``--target``): the traced program
  *without* its arrays, and weak references to them
  (:class:`memscope.compiled.held.WeakConsts`): a lowering puts them back for as long
  as it runs, and what it leaves for the compile holds none of them
  (:func:`memscope.variants.compile.lower_variant`). Where the program let go of
  them, and of the function (JAX's own caches of a function hold them as long
  as it lives), the variants are not compiled, and the report says so;
* for a ``--target``: the call's own program lowered for it, which holds none
  of the arrays, made by the reading or, where the program's code ends
  first, at its end while they still exist (:meth:`Hold.prepare`); let go
  once compiled;
* for the checkpoint policies (``--remat``, ``--advice full``): the remat plan,
  which holds the function itself, to trace it again under each policy; let go
  once they are measured, at most when the capture ends. The default advice
  holds no function.

``clear_cache()`` on the jit object lets all of it go at once, waiting only for
work in progress on it (a reading, or the variants' lowering and compiles: they
keep JAX's own cache of the cleared executable alive while they run); the end
of the capture lets go of what is left.
"""

from __future__ import annotations

import contextlib
import threading
import time
import weakref
from collections.abc import Callable, Iterator
from typing import Any

from memscope.compiled.held import WeakConsts, weak_consts
from memscope.compiled.read import CompiledHandles

#: Why a hold let go before its work was done, as the report says it.
DROPPED = "the program let go of the function first"
CLEARED = "the program cleared the function's cache (clear_cache()) first"
ENDED = "the capture ended first"
#: Seconds the program's thread waits, when it lets go of a function, for a
#: lowering in progress that holds the function's arrays (one lowering; the
#: bound only guards against a lock the lowering would wait for).
LOWERING_WAIT = 5.0


class Hold:
    """The program's objects one signature's pending work needs (see the module).

    ``owner`` is the function the program jitted: what is left of the hold's
    work on its arrays ends when it is collected. ``handles`` are JAX's stages of the call, ``handles.traced``
    being the reading view; ``traced`` the traced program itself (kept split
    from its arrays); ``plan`` the remat plan, if any.
    """

    def __init__(self, owner: Any, handles: CompiledHandles | None, traced: Any,
                 plan: Any = None) -> None:
        self._lock = threading.Condition()
        self._handles: CompiledHandles | None = handles
        self._traced: WeakConsts | None = weak_consts(traced)
        self._plan = plan
        self._reading = False
        self._users = 0
        self._lowering = 0
        #: why the variants' objects went before they were used (``None``: not yet)
        self.released: str | None = None
        #: the call's own program lowered for a ``--target`` (see :meth:`prepare`)
        self._prepare: Callable[[Any], Any] | None = None
        self._prepared: Any = None
        self._preparing = threading.Lock()
        self._finalizer: weakref.finalize | None = None
        try:
            self._finalizer = weakref.finalize(owner, self.release, DROPPED)
        except TypeError:  # a callable without weak references: held to the capture's end
            self._finalizer = None

    def attach(self, handles: CompiledHandles, plan: Any = None) -> None:
        """The reading's stages and the remat plan, for a hold made before the
        call returned (the early variant's); nothing once it was let go."""
        with self._lock:
            if self.released is None:
                self._handles, self._plan = handles, plan

    def begin_read(self) -> CompiledHandles | None:
        """The stages to read the compiled program from, marked as being read;
        ``None`` when the program cleared the function's cache first."""
        with self._lock:
            if self._handles is not None:
                self._reading = True
            return self._handles

    def end_read(self) -> None:
        """The reading is done: its stages go (the caller holds none of them)."""
        with self._lock:
            self._handles, self._reading = None, False
            self._lock.notify_all()

    @contextlib.contextmanager
    def lowering(self) -> Iterator[Any]:
        """The traced program with its arrays, for one lowering within the block
        (what the lowering leaves holds none of them); ``None`` once let go, or
        where the program let go of one of its arrays. The function's finalizer
        waits for the block to end, so the arrays go when the program drops them."""
        with self._lock:
            split = self._traced
            self._lowering += 1
        traced = None
        try:
            traced = None if split is None else split.traced()
            yield traced
        finally:
            del traced, split
            with self._lock:
                self._lowering -= 1
                self._lock.notify_all()

    def prepare(self, lower: Callable[[Any], Any]) -> None:
        """The call's own program is due a compile for a ``--target``: ``lower``
        makes its lowering (holding none of the program's arrays) from the
        traced program with them. Made by :meth:`prepared`: by the reading, or
        at the program's end (:meth:`memscope.capturing.session.Session.finish`)
        while the arrays the function closes over still exist, if the reading
        has not come to it yet (the program lets go of them as it ends)."""
        with self._lock:
            self._prepare = lower

    def prepared(self, lower: Callable[[Any], Any] | None = None) -> Any:
        """The lowering :meth:`prepare` asked for (else ``lower``'s), made now if
        not yet, or the exception it raised; ``None`` where none was asked for,
        or where the program let go of the function's arrays first."""
        with self._preparing:
            with self._lock:
                asked, done = self._prepare, self._prepared
            lower = asked or lower
            if done is not None or lower is None:
                return done
            with self.lowering() as traced:
                if traced is None:
                    return None
                try:
                    made = lower(traced)
                except Exception as e:  # the reading reports it
                    made = e
                del traced
            with self._lock:
                if asked is not None and self._prepare is asked:  # (not taken meanwhile)
                    self._prepared = made
            return made

    def take_prepared(self, lower: Callable[[Any], Any]) -> Any:
        """:meth:`prepared` (made by ``lower`` where none was asked for), which
        then goes from the hold: the compile has it."""
        made = self.prepared(lower)
        with self._lock:
            self._prepare, self._prepared = None, None
        return made

    def view(self) -> Any:
        """The traced program without its arrays (for what reads no value);
        ``None`` once let go."""
        with self._lock:
            split = self._traced
        return None if split is None else split.view

    @property
    def plan(self) -> Any:
        """The remat plan; ``None`` once let go (or none was made)."""
        with self._lock:
            return self._plan

    @contextlib.contextmanager
    def use(self) -> Iterator[Any]:
        """The remat plan (``None`` once let go, or none made) for the variants'
        work within the block; ``clear_cache()`` waits for the block to end."""
        with self._lock:
            plan = self._plan
            self._users += 1
        try:
            yield plan
        finally:
            del plan
            with self._lock:
                self._users -= 1
                self._lock.notify_all()

    def release_plan(self) -> None:
        """The checkpoint policies are measured: the function goes."""
        with self._lock:
            self._plan = None

    def release(self, why: str, *, wait: bool = False) -> None:
        """Let go of the remat plan now, and, unless the function was only
        collected (:data:`DROPPED`: the rest holds none of the program's arrays,
        only weak references to them, and the executable goes once read), of
        everything. ``why`` is :data:`DROPPED`, :data:`CLEARED` or :data:`ENDED`.
        With ``wait`` (``clear_cache()``, in the program's own call) work in
        progress on it is waited for first; a finalizer never waits."""
        with self._lock:
            if self.released is None and self._plan is not None:
                self.released = why
            self._plan = None
            if why == DROPPED:
                # The program let go of the function: a lowering that put its
                # arrays back ends first (milliseconds), so they go as under
                # python; never in memscope's own threads, which run it.
                if not threading.current_thread().name.startswith("memscope"):
                    deadline = time.monotonic() + LOWERING_WAIT
                    while self._lowering and time.monotonic() < deadline:
                        self._lock.wait(0.05)
                return
            if self.released is None and self._traced is not None:
                self.released = why
            self._traced = None
            self._prepare, self._prepared = None, None
            if wait:
                while self._reading or self._users:
                    self._lock.wait(0.1)
            self._handles = None
        if self._finalizer is not None:
            self._finalizer.detach()
