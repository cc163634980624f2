"""What one jit object's calls record: the call path behind the jit stand-in.

:class:`CallRecorder` counts each top-level call of a jit object
(:class:`memscope.capturing.jit.MeasuredJit`, which stands in for it) under its
signature. The first call of a new signature is recorded (its buffers'
addresses, JAX's warnings, its traced, lowered and compiled stages: cache hits
only, see :mod:`memscope.compiled.read`) and its reading handed to the session's
worker (:mod:`memscope.capturing.reading`), which schedules the variants.

What is kept per signature: shapes, dtypes, shardings, static argument values
and the facts read from the compiled program. Arrays are only looked at during
the call that passes them.

Runs on every jitted call of the program: nothing here adds work to a repeat
call beyond counting it. Longer than 600 lines for one reason to change, the
recording of a call: the repeat call and the first call's named steps
(:meth:`CallRecorder._first_call`), which read the recorder's own state
throughout; apart, they would reach into it from outside.
"""

from __future__ import annotations

import dataclasses
import functools
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import jax

from memscope import _compat
from memscope.analysis import oom
from memscope.analysis.observed import Observation
from memscope.capturing import between, keys, reading, refs, wrappers
from memscope.capturing.arguments import argument_values, call_arguments
from memscope.capturing.entry import Entry
from memscope.capturing.hold import Hold
from memscope.capturing.observe import (
    addresses,
    closed_refs_seen,
    leaf_sharding,
    observe,
    watch_refs,
    watched_call,
    written_back_seen,
)
from memscope.capturing.session import Session
from memscope.compiled.compile import compile_to_read
from memscope.compiled.read import (
    CompiledHandles,
    take_compiled,
)
from memscope.compiled.targets.base import pieces
from memscope.program import sites
from memscope.program.sites import definition, library, site_text
from memscope.report import (
    MeasuredMemory,
)
from memscope.variants import early, remat
from memscope.variants.compile import config_snapshot
from memscope.variants.donation import Argument, Style
from memscope.variants.fit import KeptCall

T = TypeVar("T")


def _none(_: Exception) -> None:
    return None


def _compiled_of(jitted: Any, key: Any, values: Sequence[Any], args: tuple[Any, ...],
                 kwargs: dict[str, Any], traced: Any) -> tuple[Any, str | None]:
    """The compiled stages of the call ``jitted`` just ran, as it was given."""
    return take_compiled(jitted, *keys.as_given(key, values, args, kwargs), traced=traced), None


def _not_compiled(e: Exception) -> tuple[Any, str | None]:
    return None, f"could not read the compiled program: {type(e).__name__}: {e}"


def best_effort(work: Callable[[], T], fallback: Callable[[Exception], T]) -> T:
    """``work()``, a step of memscope's own on the program's path, where an
    exception of memscope's must never reach the program: where ``work``
    raises, ``fallback(error)`` stands in, and what the step would have
    recorded is missing (the report says n/a, or why). The program's own
    exceptions (its call, its arguments) are never caught here: a step that
    may raise one says so and lets it through."""
    try:
        return work()
    except Exception as e:
        return fallback(e)


@dataclass(frozen=True)
class FirstCall:
    """What the first call of a signature showed, read while its arguments were at
    hand. It holds the call's output (until the entry is made and the output
    returned) and the compiled stages' handles, never an argument."""

    out: Any
    #: the flat leaves the call donated (JAX's order)
    donated: tuple[int, ...]
    #: the Refs the function can see by name, ``(name, ref)``
    visible_refs: tuple[tuple[str, Any], ...]
    #: JAX's warnings while it lowered the call
    warnings: tuple[str, ...]
    compile_seconds: float | None
    #: what the buffers' addresses showed (:func:`memscope.capturing.observe.observe`)
    observation: Any
    #: the compiled stages (:func:`memscope.compiled.read.take_compiled`), else why not
    handles: Any
    handles_error: str | None
    #: weak references to its Refs, read again at the run's end
    watched: tuple[Any, Any]
    measured: MeasuredMemory | None
    #: the advised variant begun at the call, and what it holds
    early: early.EarlyVariant | None
    early_hold: Hold | None


class CallRecorder:
    """What one jit object's calls record into a :class:`Session`: the jit
    object, its function and options, how the user named and spelled it, and
    the entries of the signatures it ran (``seen``). Holds no array."""

    __slots__ = (
        "framework",
        "fun",
        "function_key",
        "identity",
        "jitted",
        "library",
        "name",
        "options",
        "seen",
        "session",
        "site",
        "source",
        "spec",
        "style",
    )

    def __init__(self, jitted: Any, fun: Callable[..., Any], session: Session,
                 options: dict[str, Any] | None = None, *,
                 named_after: Callable[..., Any] | None = None) -> None:
        self.jitted = jitted
        self.session = session
        self.spec = keys.jit_spec(jitted)
        self.fun = fun
        # None for a jit made outside a capture (analyze()): its options are unknown
        self.options = None if options is None else dict(options)
        # The user's own spelling (JAX fills in the other from the signature).
        wrote_numbers = (options or {}).get("donate_argnums") is not None
        wrote_names = (options or {}).get("donate_argnames") is not None
        self.style: Style = "argnums" if wrote_numbers and not wrote_names else "argnames"
        shown = named_after if named_after is not None else fun
        self.name, self.source = definition(shown)
        self.framework = wrappers.framework(fun)
        # making the user's jit object must never fail for memscope's sake
        self.function_key, self.identity, self.library = best_effort(
            lambda: (keys.function_key(fun), keys.value_key(fun),
                     None if self.framework is not None else library(shown)),
            lambda _: (object(), object(), None))
        if self.library is not None and options is not None:
            self._named_by_jit_call()
        self.seen: dict[Any, Entry] = {}
        # a library's own jit has no line of the user's to edit, and one made before
        # the capture (options unknown) was made at no line memscope saw
        self.site = (_site(session) if self.library is None and options is not None
                     else (None, None))

    def _named_by_jit_call(self) -> None:
        """A function an installed package defines (Haiku's ``transform(f).apply``,
        made by one factory for every model) that the user's own line jits: the
        jit call, not the package's ``def`` line, says which function it is.
        Named by that line (and by the dotted name it jits, ``model.apply``),
        and the user's to advise: the jit call is theirs to edit."""
        caller = best_effort(lambda: sites.jit_caller(_compat.JAX_PACKAGES), _none)
        if caller is None:  # the package's own jit
            return
        self.library = None
        self.source = site_text(caller)
        self.name = best_effort(lambda: sites.jitted_name(caller), _none) or self.name

    def for_session(self, session: Session) -> CallRecorder:
        """The same jit object's calls recorded into ``session`` (a later capture's)."""
        return self._twin(session=session)

    def like(self, jitted: Any) -> CallRecorder:
        """The calls of ``jitted``, a copy of the jit object, recorded alike."""
        return self._twin(jitted=jitted)

    def _twin(self, **changed: Any) -> CallRecorder:
        """A recorder like this one, with ``changed`` and no signature seen yet."""
        twin = object.__new__(CallRecorder)
        for name in CallRecorder.__slots__:
            setattr(twin, name, changed.get(name, getattr(self, name)))
        twin.seen = {}
        return twin

    def let_go(self) -> None:
        """The program cleared the jit object's cache: let go of what memscope
        holds for its signatures (:meth:`Session.let_go`)."""
        self.session.let_go(list(self.seen.values()))

    def stage(self, real: Any, args: tuple[Any, ...], kwargs: dict[str, Any], *,
              traced: bool = False) -> Any:
        """``real``, JAX's ``Traced`` or ``Lowered`` of ``args``, ``kwargs``, in a
        stand-in whose compiled calls count (:mod:`memscope.capturing.aot`)."""
        # JAX's own stage, untouched, unless its compiled form could run a
        # recorded call: staged inside another trace, or given tracers, it cannot.
        if not self.session.records(jax.tree_util.tree_leaves((args, kwargs))):
            return real
        from memscope.capturing import aot  # the ahead-of-time path, only when used

        call = best_effort(lambda: aot.abstract_call(args, kwargs), lambda _: None)
        if call is None:
            return real
        return aot.Stage(real, self, call, traced=real if traced else None)

    def call(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """The jit object's call of ``args``, ``kwargs``, counted under its
        signature; a new signature's first call recorded."""
        jitted = self.jitted
        session = self.session
        if not session.records():  # staged into a trace: JAX's alone
            return jitted(*args, **kwargs)
        # No closure over the jit object, its function or the call's arguments in a
        # frame that is on the stack while JAX traces: a cell only the frame holds
        # stops JAX's leak checker (core._why_alive indexes a cell's and a dict's
        # referrers, and fails with IndexError where it finds none).
        keyed = best_effort(functools.partial(keys.call_key, self.spec, args, kwargs),
                            _none)
        if keyed is None:  # unhashable static arguments and the like: JAX says what is wrong
            return jitted(*args, **kwargs)
        key, values = keyed
        leaves = keys.program_leaves(values)
        if not session.records(leaves):  # tracers at the top level
            return jitted(*args, **kwargs)
        entry = self.seen.get(key)
        pending = session.before_call(leaves, entry is None)
        if entry is None:
            try:
                out, entry = self._first_call(key, leaves, args, kwargs, values)
            except Exception:
                failed = self.seen.get(key)
                if failed is not None:
                    session.after_call(failed, None, pending, failed=True)
                raise
        else:
            if entry.first_leaves is not None:
                entry.compare_leaves(leaves, session.calls + 1)
            try:
                if entry.watch_next:  # the first call's buffers showed a miss
                    out = watched_call(entry, functools.partial(jitted, *args, **kwargs),
                                       leaves)
                else:
                    out = jitted(*args, **kwargs)
            except Exception as e:
                self.session.failed(entry, e)
                session.after_call(entry, None, pending, failed=True)
                raise
            entry.calls += 1
            if entry.donated:  # after the call: only a call that ran donated anything
                session.ledger.record(entry, session.calls + 1, leaves, entry.donated)
        session.after_call(entry, out, pending)
        session.count_call(repeat=entry.calls > 1, name=entry.name)
        return out

    def _first_call(self, key: Any, leaves: Sequence[Any], args: tuple[Any, ...],
                    kwargs: dict[str, Any], values: Sequence[Any]) -> tuple[Any, Entry]:
        """Run the first call of a signature of this jit object and record it:
        ``leaves`` are the call's flat leaves as its program takes them
        (:func:`keys.program_leaves` of ``values``, the call's own)."""
        session = self.session
        # JAX keeps one executable per function object, options and signature:
        # the same function jitted again alike runs the program already read.
        same_function = (self.identity, self.spec.token, key)
        entry = session.lookup(same_function)
        if entry is not None:
            out = self.jitted(*args, **kwargs)
            self._merged(entry, key, leaves)
            return out, entry
        shown = self._run_first(key, same_function, leaves, args, kwargs, values)
        entry, program_keys = self._known_program(key, shown)
        if entry is not None:
            self._let_go_early(shown)
            session.alias(same_function, entry)
            self._merged(entry, key, leaves)
            return shown.out, entry
        mine = self._new_entry(key, leaves, args, kwargs, shown)
        same_program, same_executable = program_keys
        entry = session.add(same_program, mine)
        session.alias(same_function, entry)
        if same_executable is not None:
            session.alias(same_executable, entry)
        if shown.handles is not None and entry is mine:
            self._schedule_reading(entry, leaves, args, kwargs, shown)
        else:
            self._let_go_early(shown)
        entry.calls += 1
        self.seen[key] = entry
        return shown.out, entry

    def _run_first(self, key: Any, same_function: Any, leaves: Sequence[Any],
                   args: tuple[Any, ...], kwargs: dict[str, Any], values: Sequence[Any]
                   ) -> FirstCall:
        """Call the jit object, with what must be looked at before and after: the
        buffers' addresses, the Refs, device memory, JAX's warnings while it
        lowers, its compiled stages (cache hits, taken while the arguments are
        at hand). An exception of the call is the program's, raised as it is."""
        session = self.session
        # An input still being computed is waited for only where the call may
        # donate it (its buffer is gone after the call); elsewhere it is read
        # after the call (see observe: its buffer does not move).
        # (no comprehension over self: on Python 3.11 a closure, see call)
        before = list(map(functools.partial(addresses, wait=self.spec.donates),
                          leaves))
        visible, refs_before = self._refs_before(args, kwargs)
        donated = self._donation_check(leaves, before, args, kwargs)
        memory_before = session.device.now()
        session.clock.start()
        begun, early_hold = None, None
        try:
            with session.recording_warnings() as lowering_warnings:
                # (a hijax value's program is not the one predicted from its leaves)
                begun, early_hold = ((None, None) if any(map(_compat.values.is_hijax, values))
                                     else self._begin_early(leaves, args, kwargs))
                traced = self._trace_before(values, args, kwargs)
                try:
                    out = self.jitted(*args, **kwargs)
                except Exception as e:
                    if oom.is_out_of_memory(str(e)):
                        self._failed_first_call(key, same_function, leaves, args, kwargs, e)
                    raise
        except BaseException:
            if begun is not None:
                session.defer(functools.partial(reading.let_go, session, begun))
            raise
        finally:
            compile_seconds = session.clock.stop()
            if begun is not None:
                begun.released.set()
        memory_after = session.device.now()
        observation = observe(before, leaves, out)
        # With the call's arguments as it got them: it may change the objects that
        # hold them (a Flax NNX module in graph mode); JAX keyed its program on them
        # as they were.
        handles, handles_error = best_effort(
            functools.partial(_compiled_of, self.jitted, key, values, args, kwargs,
                              traced),
            _not_compiled)
        if handles is not None:
            observation = closed_refs_seen(observation, handles, refs_before)
            observation = written_back_seen(observation, handles, values)
        measured = (None if memory_before is None or memory_after is None else
                    MeasuredMemory(memory_before[0], *memory_after,
                                   peak_bytes_in_use_before=memory_before[1]))
        return FirstCall(out=out, donated=donated, visible_refs=tuple(visible),
                         warnings=tuple(lowering_warnings), compile_seconds=compile_seconds,
                         observation=observation, handles=handles,
                         handles_error=handles_error, watched=watch_refs(leaves, handles),
                         measured=measured, early=begun, early_hold=early_hold)

    def _known_program(self, key: Any, shown: FirstCall
                       ) -> tuple[Entry | None, tuple[Any, Any]]:
        """The entry already recorded for the program this call ran, if any, and
        the session's keys for it: the same code, options, signature and
        compiled program; the same executable of this jit object."""
        session = self.session
        # Another function object of the same code (a jit made in a loop) is the
        # same entry only where XLA compiled the same program: globals and
        # constants it reads may differ (a fingerprint of a few microseconds).
        handles = shown.handles
        fingerprint = (None if handles is None
                       else _compat.executables.executable_fingerprint(handles.compiled))
        same_program = (self.function_key, self.spec.token, key, fingerprint)
        entry = session.lookup(same_program)
        # A new signature JAX runs with an executable it has for an earlier one
        # of this jit object (it traced, lowered and compiled nothing): not a
        # recompile, the same program. The fingerprint guards the executable's
        # id against another made at a freed one's address.
        executable = None if handles is None else _compat.executables.executable_id(handles.compiled)
        same_executable = (None if executable is None else
                           ("executable", self.identity, self.spec.token,
                            executable, fingerprint))
        if entry is None and same_executable is not None:
            entry = session.lookup(same_executable)
            if (entry is not None and entry.observation_again is None
                    and isinstance(shown.observation, Observation)):
                # The first call may have had no device buffers (NumPy arrays):
                # this one's are a second look at the same program.
                entry.observation_again = shown.observation
        return entry, (same_program, same_executable)

    def _new_entry(self, key: Any, leaves: Sequence[Any], args: tuple[Any, ...],
                   kwargs: dict[str, Any], shown: FirstCall) -> Entry:
        """The entry of a program no call recorded before, from what its first call
        showed."""
        session = self.session
        entry = best_effort(
            lambda: self.describe(key, args, kwargs, shown.out),
            lambda e: Entry(name=self.name, source=self.source,
                            signature="(?)", spec=self.spec,
                            error=f"could not describe the call: {type(e).__name__}: {e}"))
        entry.library = self.library
        self.stamp(entry)
        entry.warnings = shown.warnings
        if shown.observation is not None:  # (a compile-only analysis observes nothing)
            session.observed(entry, shown.observation)
        entry.watched_refs, entry.watched_closed = shown.watched
        entry.key, entry.compile_seconds = key, shown.compile_seconds
        entry.donated = shown.donated
        entry.first_call = session.calls + 1
        entry.remember_leaves(leaves)
        if shown.donated:
            session.ledger.record(entry, entry.first_call, leaves, shown.donated)
        entry.measured = shown.measured
        if shown.handles_error is not None:
            entry.error = shown.handles_error
        if session.keep_calls:
            entry.call = self._kept_call(args, kwargs, entry)
        return entry

    def _schedule_reading(self, entry: Entry, leaves: Sequence[Any], args: tuple[Any, ...],
                          kwargs: dict[str, Any], shown: FirstCall) -> None:
        """Hand the new entry's reading and its variants to the session's worker,
        off the program's path (:mod:`memscope.capturing.reading`)."""
        session = self.session
        plan = None
        if (session.remat and self.library is None
                and self.options is not None):
            plan = remat.plan_call(self.fun, self.options, args, kwargs,
                                   session.remat_flops)
        shardings = [leaf_sharding(x) for x in leaves]
        reading.schedule(session, entry, self.fun, shown.handles, shardings,
                         plan=plan, ref_names={id(ref): name for name, ref in shown.visible_refs},
                         early=shown.early, hold=shown.early_hold)

    def _let_go_early(self, shown: FirstCall) -> None:
        """Let go of an advised variant begun early that no reading takes over."""
        if shown.early is not None:
            session = self.session
            session.defer(functools.partial(reading.let_go, session, shown.early))

    def compile_only(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Entry:
        """Record the call ``args``, ``kwargs`` (``jax.ShapeDtypeStruct``'s where
        arrays would be) without running it: traced, lowered and compiled for
        the session's target (its arguments' devices: a ``--target``'s, or this machine's),
        then read, advised and measured as a first call is. Nothing is
        observed (no buffer exists), and the entry counts no call."""
        session = self.session
        target = session.target
        key, values = keys.call_key(self.spec, args, kwargs)
        leaves = keys.program_leaves(values)
        session.clock.start()
        try:
            with session.recording_warnings() as warned:
                traced = self.jitted.trace(*args, **kwargs)
                # (the arguments are on the target's devices already: memscope.analyze)
                lowered = _compat.stages.lower(traced)
                if target.runs_here:  # compiled as JAX would for the call
                    built, compiled = None, lowered.compile()
                else:
                    built = compile_to_read(target, traced, lowered, cache=session.host.cache,
                                            counted=False)
                    compiled = pieces(built)[0]
        finally:
            seconds = session.clock.stop()
        handles = CompiledHandles(_compat.stages.without_call_arrays(traced), lowered, compiled, built)
        shown = FirstCall(out=None, donated=(), visible_refs=(), warnings=tuple(warned),
                          compile_seconds=seconds, observation=None, handles=handles,
                          handles_error=None, watched=((), ()), measured=None, early=None,
                          early_hold=None)
        entry = self._new_entry(key, leaves, args, kwargs, shown)
        entry.not_observed = "a compile-only analysis: nothing ran"
        entry = session.add(("compile-only", id(self), key), entry)
        self._schedule_reading(entry, leaves, args, kwargs, shown)
        return entry

    def _trace_before(self, values: Sequence[Any], args: tuple[Any, ...],
                      kwargs: dict[str, Any]) -> Any:
        """The call traced now, before it runs, where it takes a mutable hijax
        value (JAX 0.7 to 0.10): the call may change what the value holds (its
        arrays, even their structure), and a trace after it would be the next
        call's program. JAX's call then takes this trace from its cache."""
        if not any(map(_compat.values.writes_back, values)):
            return None
        # (the call itself says what is wrong, if anything is)
        return best_effort(lambda: self.jitted.trace(*args, **kwargs),
                           lambda _: None)

    def _begin_early(self, leaves: Sequence[Any], args: tuple[Any, ...],
                     kwargs: dict[str, Any]) -> tuple[early.EarlyVariant | None, Hold | None]:
        """Begin the advised variant now, where it can be predicted
        (:mod:`memscope.variants.early`): lowered while JAX compiles this call,
        compiled once the call returns. The trace taken here is JAX's own: the
        call reuses it from JAX's cache. The traced program is held as the
        reading's will be (:class:`~memscope.capturing.hold.Hold`), which the
        reading then takes over."""
        session = self.session
        # (the call itself says what is wrong, if anything is)
        begun = best_effort(lambda: self._prepare_early(leaves, args, kwargs), lambda _: None)
        if begun is None:
            return None, None
        variant, hold, job = begun
        if variant.mask is not None:
            session.host.counts.count_early()
        session.defer(job)
        return variant, hold

    def _prepare_early(self, leaves: Sequence[Any], args: tuple[Any, ...],
                       kwargs: dict[str, Any]
                       ) -> tuple[early.EarlyVariant, Hold, Callable[[], None]] | None:
        """The early variant, what it holds and its job; ``None`` where none is
        begun. For a ``--target`` one is begun without a predicted donation too:
        the call's own program compiled for the target begins with it."""
        session, spec = self.session, self.spec
        own = not session.target.runs_here
        if (self.library is not None or self.framework is not None
                or (spec.donates and not own)  # (see early.predict)
                or not session.host.early_allowed() or not early.worth_tracing(leaves)):
            return None
        session.host.counts.count_early(traced=True)
        traced = self.jitted.trace(*args, **kwargs)
        arguments = call_arguments(self.fun, spec, args, kwargs)
        mask = None if spec.donates else early.predict(traced, leaves, arguments,
                                                       self.style)
        if mask is None and not own:
            return None
        hold = Hold(self.fun, None, _compat.stages.without_call_arrays(traced))
        session.keep(hold)
        variant = early.EarlyVariant(mask)
        return variant, hold, functools.partial(early.start, variant, hold.lowering, session.host,
                                                config_snapshot())

    def _refs_before(self, args: tuple[Any, ...], kwargs: dict[str, Any]
                     ) -> tuple[list[tuple[str, Any]], dict[int, Any]]:
        """The Refs the function can see by name, and the buffers (by ``id``) of
        those and of Refs passed where JAX does not trace them: before the call,
        for the Refs its program turns out to close over."""
        def look() -> tuple[list[tuple[str, Any]], dict[int, Any]]:
            visible = refs.visible_refs(self.fun)
            passed = refs.static_refs(self.spec, args, kwargs,
                                      self.framework)
            return visible, {id(ref): addresses(ref) for _, ref in (*visible, *passed)}

        return best_effort(look, lambda _: ([], {}))

    def _merged(self, entry: Entry, key: Any, leaves: Sequence[Any]) -> None:
        """Count a first call of this jit object under ``entry``: the same program."""
        session = self.session
        if entry.donated:
            session.ledger.record(entry, session.calls + 1, leaves, entry.donated)
        entry.calls += 1
        self.seen[key] = entry

    def _donation_check(self, leaves: Sequence[Any], addresses: Sequence[Any],
                        args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[int, ...]:
        """The leaves this signature donates; first, any buffer donated twice, or
        donated and passed again, is named (JAX's own error comes at the call)."""
        spec = self.spec
        if not spec.donates:
            return ()
        session = self.session

        def check() -> tuple[int, ...]:
            arguments = call_arguments(self.fun, spec, args, kwargs)
            donated = between.donated_leaves(arguments, spec)
            if len(leaves) != sum(len(a.leaves) for a in arguments):
                return ()
            session.ledger.check(
                self.name, self.source, session.calls + 1, leaves,
                addresses, donated, lambda: between.leaf_paths(
                    arguments, argument_values(arguments, args, kwargs)))
            return donated

        return best_effort(check, lambda _: ())

    def _kept_call(self, args: tuple[Any, ...], kwargs: dict[str, Any],
                   entry: Entry) -> KeptCall | None:
        """The call in shapes, its arguments in the user's terms (``entry``'s)."""
        from memscope.capturing import aot

        def keep() -> KeptCall:
            call_args, call_kwargs = aot.abstract_call(args, kwargs)
            arguments = call_arguments(self.fun, self.spec, args, kwargs)
            user = entry.arguments or arguments
            if self.session.keep_calls:  # memscope fit: until it has answered
                return KeptCall(self.jitted, call_args, call_kwargs, user,
                                fun=self.fun, options=self.options,
                                jax_arguments=arguments)
            # A post-mortem's: never longer than the program holds the function.
            return KeptCall(weakref.ref(self.jitted), call_args, call_kwargs,
                            user, weak=True, jax_arguments=arguments)

        return best_effort(keep, lambda _: None)

    def _failed_first_call(self, key: Any, session_key: Any, leaves: Sequence[Any],
                           args: tuple[Any, ...], kwargs: dict[str, Any],
                           error: Exception) -> None:
        """Record a first call that ran out of memory, for the post-mortem: its
        compiled program is read later, off the program's path, from the call's
        shapes (an executable that failed to compile is compiled there again)."""
        session = self.session
        entry = best_effort(
            lambda: self.describe(key, args, kwargs, None),
            lambda _: Entry(name=self.name, source=self.source,
                            signature=keys.signature_text(key), spec=self.spec))
        entry.library = self.library
        # Only the failed executable's cache tells a compile from a run.
        handles = best_effort(lambda: take_compiled(self.jitted, args, kwargs),
                              lambda _: None)
        where = "call" if handles is not None else "compile"
        session.failed(entry, error, where)
        entry.call = self._kept_call(args, kwargs, entry)
        if session.add(session_key, entry) is not entry:
            return
        self.seen[key] = entry
        if handles is not None:
            shardings = [leaf_sharding(x) for x in leaves]
            reading.schedule(session, entry, self.fun, handles, shardings)

    def stamp(self, entry: Entry) -> None:
        """Record on ``entry`` where the jit was made and where this call came from."""
        entry.jit_site, entry.jit_file_sha256 = self.site
        where = sites.user_frame()
        entry.call_site = site_text(where) if where is not None else None

    def describe(self, key: Any, args: tuple[Any, ...], kwargs: dict[str, Any],
               out: Any) -> Entry:
        """A new entry for the first call of a signature, in the user's terms when a
        framework's wrapper made the jit (see :mod:`memscope.capturing.wrappers`)."""
        fun, spec = self.fun, self.spec

        def jax_arguments() -> tuple[Argument, ...]:
            return call_arguments(fun, spec, args, kwargs)

        wrapped = None
        if self.framework is not None:
            wrapped = wrappers.describe(self.framework, fun, args, kwargs, out,
                                        style=self.style,
                                        jax_arguments=jax_arguments)
        if wrapped is None:
            return Entry(name=self.name, source=self.source,
                         signature=keys.signature_text(key), spec=spec,
                         style=self.style, arguments=jax_arguments())
        name, source = definition(wrapped.function)
        # The entry keeps the call in the user's terms, not the function itself.
        wrapped = dataclasses.replace(wrapped, function=None)
        if wrapped.donated_positions is not None:
            # Equinox donates in its own terms; say which user arguments that covers.
            spec = dataclasses.replace(spec, static_argnums=(), static_argnames=(),
                                       donate_argnums=wrapped.donated_positions,
                                       donate_argnames=wrapped.donated_names or ())
        return Entry(name=name, source=source, signature=wrapped.signature or keys.signature_text(key),
                     spec=spec, style=wrapped.style, wrapper=wrapped,
                     arguments=(wrapped.arguments if wrapped.arguments is not None
                                else jax_arguments()))



def is_jax_internal(fun: Any) -> bool:
    module = getattr(sites.base_function(fun), "__module__", None) or ""
    return module.split(".")[0] in _compat.JAX_PACKAGES


def _site(session: Session) -> tuple[str | None, str | None]:
    """``(path:line, file SHA-256)`` of the user's code making a jit now."""
    def look() -> tuple[str | None, str | None]:
        where = sites.user_frame()
        if where is None:
            return None, None
        return site_text(where), sites.file_sha256(where[0], session.file_hashes)

    # making the user's jit object must never fail for memscope's sake
    return best_effort(look, lambda _: (None, None))
