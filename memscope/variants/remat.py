"""What the backward pass keeps, and what rematerialization would trade, measured.

For a captured function that differentiates (``jax.grad``, ``value_and_grad``,
``vjp``, or a framework's wrapper over them), memscope traces the function
again, off the program's path, with JAX's reverse-mode entry point hooked
(:func:`vjp_hook`):

- once to list each differentiation's residuals with JAX's own
  ``saved_residuals`` (shape, dtype, primitive, source line);
- once per checkpoint policy, with the differentiated function put under
  ``jax.checkpoint(policy=...)``, then lowered and compiled (never run) to read
  its peak and XLA's FLOPs.

The jaxpr JAX traced for the call holds the forward and backward passes already
fused, with no mark of where a ``grad`` began; tracing again is the one way that
is the same on every supported JAX. Whatever the user's function prints while
traced again goes nowhere (:func:`silenced`); the program's own threads print
as usual.
"""

from __future__ import annotations

import contextlib
import functools
import json
import sys
import threading
from collections import defaultdict
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace
from typing import Any, TextIO

import jax
import numpy as np

from memscope import _compat, _frameworks

# (the --remat options, read before JAX is, live with the advice levels)
from memscope.analysis.advice import DEFAULT_MAX_FLOPS_INCREASE as DEFAULT_MAX_FLOPS_INCREASE
from memscope.compiled.cache import CompileCache
from memscope.compiled.compile import compile_to_read
from memscope.compiled.held import reading_view
from memscope.compiled.read import CompiledFacts
from memscope.compiled.targets.base import Target
from memscope.compiled.targets.here import HereTarget
from memscope.errors import described
from memscope.program.sites import display_path, is_users, library
from memscope.report import (
    Differentiation,
    Remat,
    RematAdvice,
    RematVariant,
    Residual,
    ResidualLine,
)
from memscope.variants import jaxpr_facts
from memscope.variants.compile import (
    ConfigSnapshot,
    LoweredVariant,
    applied_config,
    per_call_leaf,
)
from memscope.variants.donation_variants import LET_GO, Host, TracedSource, VariantFacts

#: The policies measured, JAX's ``jax.checkpoint_policies`` names; the first is
#: the baseline (every residual saved: what plain ``jax.grad`` does).
POLICIES = ("everything_saveable", "dots_saveable", "dots_with_no_batch_dims_saveable",
            "nothing_saveable")
#: The offloading policies measured beside them: residuals moved to host memory
#: (``pinned_host``) instead of kept on the device or recomputed. The names
#: policy offloads the values the user named with ``checkpoint_name`` (measured
#: only where there are some). They are measured, never advised.
OFFLOAD_POLICIES = ("offload_dot_with_no_batch_dims", "save_and_offload_only_these_names")
OFFLOAD_DST = "pinned_host"
#: The policy made from the names the user gave values with ``checkpoint_name``:
#: those saved, everything else recomputed (``memscope fit --plan``).
NAMED_POLICIES = ("save_only_these_names",)


def policy_object(policy: str, names: Sequence[str] = ()) -> Any:
    """``jax.checkpoint_policies.<policy>``, the offloading ones made for
    ``device`` -> ``pinned_host`` (the names one for ``names``)."""
    policies = jax.checkpoint_policies
    if policy == "offload_dot_with_no_batch_dims":
        return policies.offload_dot_with_no_batch_dims("device", OFFLOAD_DST)
    if policy == "save_and_offload_only_these_names":
        return policies.save_and_offload_only_these_names(
            names_which_can_be_saved=[], names_which_can_be_offloaded=list(names),
            offload_src="device", offload_dst=OFFLOAD_DST)
    if policy == "save_only_these_names":
        return policies.save_only_these_names(*names)
    return getattr(policies, policy)


def policy_text(policy: str, names: Sequence[str] = ()) -> str:
    """:func:`policy_object`'s policy as the user writes it."""
    base = f"jax.checkpoint_policies.{policy}"
    listed = ", ".join(json.dumps(n) for n in names)
    if policy == "offload_dot_with_no_batch_dims":
        return f'{base}("device", "{OFFLOAD_DST}")'
    if policy == "save_and_offload_only_these_names":
        return (f"{base}(names_which_can_be_saved=[], names_which_can_be_offloaded=[{listed}], "
                f'offload_src="device", offload_dst="{OFFLOAD_DST}")')
    if policy == "save_only_these_names":
        return f"{base}({listed})"
    return base


@dataclass(frozen=True)
class Found:
    """One differentiation seen while tracing again, in the user's terms."""

    api: str
    function: str | None
    source: str | None
    residuals: tuple[jaxpr_facts.SavedResidual, ...]


# -------------------------------------------------------------- tracing --


def abstract(call: tuple[tuple[Any, ...], dict[str, Any]]
             ) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """The call with every array (JAX or NumPy) as a ``ShapeDtypeStruct``."""
    def one(x: Any) -> Any:
        if isinstance(x, jax.Array):
            return jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=x.sharding,
                                        weak_type=getattr(x, "weak_type", False))
        if isinstance(x, np.ndarray):
            return jax.ShapeDtypeStruct(x.shape, x.dtype)
        return x

    result: tuple[tuple[Any, ...], dict[str, Any]] = jax.tree_util.tree_map(one, call)
    return result


#: ``hook(fun, primals, has_aux)`` for the thread that set it (see :func:`vjp_hook`)
_VJP_HOOK = threading.local()

VjpHook = Callable[[Callable[..., Any], tuple[Any, ...], bool], "Callable[..., Any] | None"]


@contextlib.contextmanager
def vjp_hook(hook: VjpHook) -> Iterator[None]:
    """Hand every reverse-mode differentiation the calling thread traces in the
    block to ``hook(fun, primals, has_aux)`` first; a callable it returns is
    differentiated in ``fun``'s place (:func:`memscope._compat.hooks.vjp_replaced`).
    Other threads (the user's program) go straight to JAX's own; the hook is off
    while it runs, so its own tracing is not hooked.
    """
    def replacement_for(fun: Callable[..., Any], primals: tuple[Any, ...],
                        has_aux: bool) -> Callable[..., Any] | None:
        active = getattr(_VJP_HOOK, "hook", None)
        if active is None:
            return None
        _VJP_HOOK.hook = None
        try:
            return active(fun, primals, has_aux)
        finally:
            _VJP_HOOK.hook = active

    with _compat.hooks.vjp_replaced(replacement_for):
        _VJP_HOOK.hook = hook
        try:
            yield
        finally:
            _VJP_HOOK.hook = None


def _fresh_jit(fun: Callable[..., Any], options: dict[str, Any]) -> Any:
    """``jax.jit(fun, **options)`` that JAX traces anew (a new function object
    misses JAX's trace cache) and memscope does not capture."""
    @functools.wraps(fun)
    def again(*args: Any, **kwargs: Any) -> Any:
        return fun(*args, **kwargs)

    jitted = _compat.hooks.make_jit(again, options)
    return getattr(jitted, "_memscope_jitted", jitted)


def find(fun: Callable[..., Any], options: dict[str, Any],
         call: tuple[tuple[Any, ...], dict[str, Any]]) -> tuple[list[Found], Any]:
    """Trace ``fun`` again and list its differentiations with their residuals;
    also JAX's ``Traced`` of this trace.

    The listing is JAX's ``saved_residuals`` of each differentiated function,
    after which JAX calls it again. A function that cannot be called twice
    (``nnx.grad``'s) is then traced once and replayed, for the listing and
    for JAX (:func:`memscope.variants.jaxpr_facts.traced_once`); the replay's listing may
    differ from JAX's in scalars JAX would fold into literals.
    """
    try:
        return _find(fun, options, call, replay=False)
    except Exception:
        return _find(fun, options, call, replay=True)


def _find(fun: Callable[..., Any], options: dict[str, Any],
          call: tuple[tuple[Any, ...], dict[str, Any]], *, replay: bool
          ) -> tuple[list[Found], Any]:
    found: list[Found] = []

    def hook(f: Callable[..., Any], primals: tuple[Any, ...], has_aux: bool
             ) -> Callable[..., Any] | None:
        api, name, source = _caller()
        once = jaxpr_facts.traced_once(f, primals) if replay else f
        listed = jaxpr_facts.saved_residuals(_without_aux(once) if has_aux else once, primals)
        found.append(Found(api, name, source, tuple(listed)))
        return once if replay else None

    args, kwargs = call
    with silenced(), _frameworks.retrace_context(fun), vjp_hook(hook):
        traced = _fresh_jit(fun, options).trace(*args, **kwargs)
    return found, traced


def _without_aux(f: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(f)
    def primal(*args: Any) -> Any:
        return f(*args)[0]
    return primal


def lower_with_policy(fun: Callable[..., Any], options: dict[str, Any],
                      call: tuple[tuple[Any, ...], dict[str, Any]], policy: str,
                      donated: tuple[bool, ...] | None = None,
                      names: Sequence[str] = (), target: Target | None = None) -> Any:
    """``fun`` traced again with every differentiated function under
    ``jax.checkpoint(policy=jax.checkpoint_policies.<policy>)`` (see
    :func:`policy_object`), and lowered (with the flat donation ``donated``, if
    given), for ``target`` (this machine by default)."""
    chosen = policy_object(policy, names)

    def hook(f: Callable[..., Any], primals: tuple[Any, ...], has_aux: bool
             ) -> Callable[..., Any]:
        return jax.checkpoint(f, policy=chosen)

    args, kwargs = call
    with silenced(), _frameworks.retrace_context(fun), vjp_hook(hook):
        traced = _fresh_jit(fun, options).trace(*args, **kwargs)
    if donated is not None:
        traced = _compat.stages.with_donation(traced, per_call_leaf(traced, donated))
    return traced, (target if target is not None else HereTarget()).lower(traced)


def measure(traced: Any, lowered: Any, policy: str,
            compile_in: Callable[[Callable[[], Any]], Any],
            target: Target | None = None, cache: CompileCache | None = None) -> RematVariant:
    """Compile ``lowered`` (through ``compile_in``, which runs a thunk; through
    ``cache`` where given) and read its peak (device memory) and FLOPs; the
    executable is dropped once read. ``lowered`` is for ``target`` (this
    machine by default: :func:`lower_with_policy`)."""
    target = target if target is not None else HereTarget()
    try:
        compiled = compile_in(lambda: compile_to_read(target, traced, lowered, cache=cache))
        memory = target.memory(traced, lowered, compiled)
        return RematVariant(policy, memory.peak_bytes, target.flops(traced, compiled),
                            host_bytes=memory.host.peak_bytes,
                            offloads=policy in OFFLOAD_POLICIES)
    except Exception as e:  # reported with the variant; the program is unaffected
        return RematVariant(policy, None, None, error=described(e))


# ----------------------------------------------------- the user's terms --

_JAX_APIS = {"value_and_grad_f": "jax.value_and_grad", "grad_f": "jax.grad",
             "grad_f_aux": "jax.grad", "vjp": "jax.vjp"}


def _caller() -> tuple[str, str | None, str | None]:
    """How the differentiation now being traced was written: the API, the
    differentiated function's name, and the user's line that calls it."""
    frame = sys._getframe(2)
    api, name = "jax.vjp", None
    while frame is not None:
        code = frame.f_code
        package = library(_Code(code))
        if package is None and is_users(code.co_filename):
            return api, name, f"{display_path(code.co_filename)}:{frame.f_lineno}"
        if package == "jax" and code.co_name in _JAX_APIS:
            api = _JAX_APIS[code.co_name]
            name = _name(frame.f_locals.get("fun")) or name
        elif package in _frameworks.DIFFERENTIATING:
            wrapper, wrapped = _frameworks.differentiation_api(package, frame)
            api, name = wrapper or api, _name(wrapped) or name
        frame = frame.f_back  # type: ignore[assignment]
    return api, name, None


class _Code:
    """A stand-in function for :func:`memscope.program.sites.library`, which reads ``__code__``."""

    def __init__(self, code: Any) -> None:
        self.__code__ = code


def _name(fun: Any) -> str | None:
    while isinstance(fun, functools.partial):
        fun = fun.func
    name = getattr(fun, "__name__", None)
    return name if isinstance(name, str) and name.isidentifier() else None


def code(diff: Differentiation, policy: str, names: Sequence[str] = ()) -> str:
    """The change that applies ``policy`` (made for ``names`` where it takes
    them) to ``diff``, as the user would write it."""
    fn = diff.function or "loss_fn"
    api = diff.api
    written = policy_text(policy, names)
    if api.startswith("eqx."):
        return f"{api}(eqx.filter_checkpoint({fn}, policy={written}))"
    if api.startswith("nnx."):
        return f"{api}(nnx.remat({fn}, policy={written}))"
    if api == "jax.vjp":
        return f"jax.vjp(jax.checkpoint({fn}, policy={written}), ...)"
    return f"{api}(jax.checkpoint({fn}, policy={written}))"


# ----------------------------------------------------------------- pure --


def differentiation(found: Found) -> Differentiation:
    """``found`` as report data: residuals with their bytes, grouped by line."""
    residuals = tuple(
        Residual(shape=r.shape, dtype=r.dtype, bytes=_compat.values.leaf_nbytes(r.shape, r.dtype),
                 origin=r.text, primitive=r.primitive,
                 source=_shown(r.source))
        for r in found.residuals)
    return Differentiation(api=found.api, function=found.function, source=found.source,
                           residuals=residuals, total_bytes=sum(r.bytes for r in residuals),
                           by_line=by_line(residuals))


def _shown(source: str | None) -> str | None:
    if source is None:
        return None
    path, _, line = source.rpartition(":")
    return f"{display_path(path)}:{line}"


def by_line(residuals: Sequence[Residual]) -> tuple[ResidualLine, ...]:
    """Residuals grouped by source line, largest first (then by line, for a
    stable order)."""
    groups: dict[str | None, list[Residual]] = defaultdict(list)
    for r in residuals:
        groups[r.source].append(r)
    lines = [ResidualLine(source, sum(r.bytes for r in rs), len(rs),
                          tuple(dict.fromkeys(r.primitive for r in rs if r.primitive)))
             for source, rs in groups.items()]
    return tuple(sorted(lines, key=lambda g: (-g.bytes, g.source or "")))


def choose(variants: Sequence[RematVariant], max_flops_increase: float
           ) -> RematVariant | None:
    """The policy with the largest peak saving against ``as_written`` whose
    FLOPs grow by at most ``max_flops_increase``; ``None`` if none saves."""
    written = next((v for v in variants if v.policy == "as_written"), None)
    if written is None or written.peak_bytes is None:
        return None
    best: RematVariant | None = None
    for v in variants:
        if v.policy == "as_written" or v.peak_bytes is None or v.peak_bytes >= written.peak_bytes:
            continue
        if v.offloads:  # measured and shown, not advised (host memory is another budget)
            continue
        if not _within(v.flops, written.flops, max_flops_increase):
            continue
        # The lowest peak; of equal peaks, the fewest FLOPs.
        if best is None or (v.peak_bytes, v.flops or 0.0) < (best.peak_bytes or 0,
                                                             best.flops or 0.0):
            best = v
    return best


def _within(flops: float | None, before: float | None, limit: float) -> bool:
    # Unknown FLOPs cannot be shown to stay within the limit.
    if flops is None or before is None:
        return False
    return flops <= before * (1 + limit) if before > 0 else flops <= 0


def advice(diffs: Sequence[Differentiation], variants: Sequence[RematVariant],
           chosen: RematVariant, max_flops_increase: float, *,
           donation: str | None = None, combined: RematVariant | None = None
           ) -> RematAdvice:
    """The advice for ``chosen``, with the donation advice folded in when given
    (``combined`` measured both applied)."""
    written = next(v for v in variants if v.policy == "as_written")
    lines = sorted({code(d, chosen.policy) for d in diffs})
    after = combined if combined is not None and combined.error is None else chosen
    return RematAdvice(policy=chosen.policy, code="; ".join(lines),
                       peak_before=written.peak_bytes, peak_after=after.peak_bytes,
                       flops_before=written.flops, flops_after=after.flops,
                       max_flops_increase=max_flops_increase,
                       donation=donation, combined=after is combined)


# --------------------------------------------------------------- output --


class _ThreadFilter:
    """A stream that drops what the silenced threads write, and passes the rest on."""

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream
        self.silent: set[int] = set()

    def write(self, text: str) -> int:
        if threading.get_ident() in self.silent:
            return len(text)
        return self.stream.write(text)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.stream, name)


_silence_lock = threading.Lock()


@contextlib.contextmanager
def silenced() -> Iterator[None]:
    """Drop what the calling thread writes to ``sys.stdout``/``sys.stderr`` in the
    block; other threads (the program's) write through as before."""
    me = threading.get_ident()
    with _silence_lock:
        filters = []
        for name in ("stdout", "stderr"):
            stream = getattr(sys, name)
            if not isinstance(stream, _ThreadFilter):
                stream = _ThreadFilter(stream)
                setattr(sys, name, stream)
            stream.silent.add(me)
            filters.append((name, stream))
    try:
        yield
    finally:
        with _silence_lock:
            for name, stream in filters:
                stream.silent.discard(me)
                if not stream.silent and getattr(sys, name) is stream:
                    setattr(sys, name, stream.stream)


# ------------------------------------------------------------- the flow --


@dataclass(frozen=True)
class RematPlan:
    """What :func:`analyse` needs of one captured call, none of it an array but
    what the function itself closes over: ``function()`` gives the function, held
    until the analysis is done (it is traced again under each policy), at most
    until the capture ends."""

    function: Callable[[], Callable[..., Any] | None]
    options: dict[str, Any]
    call: tuple[tuple[Any, ...], dict[str, Any]]
    max_flops_increase: float = DEFAULT_MAX_FLOPS_INCREASE
    #: compile the policies for this target (``--target``; this machine by default)
    target: Target | None = None
    #: memscope's cache of the compiles it reads
    cache: CompileCache | None = None


def analyse(plan: RematPlan, written: RematVariant, *, compile_in: Callable[[Callable[[], Any]], Any],
            donation: tuple[str, tuple[bool, ...]] | None = None,
            cancelled: Callable[[], bool] = lambda: False) -> Remat | None:
    """Residuals and measured policies of ``plan``'s function; ``None`` when it
    differentiates nothing.

    ``written`` is the function as the user compiled it. ``donation`` is the
    donation advice (its setting and flat mask), measured together with the
    chosen policy. Each policy is one trace, one lowering and one compile.
    """
    fun = plan.function()
    if fun is None:
        raise LookupError("the program let go of the function first")
    found, traced = find(fun, plan.options, plan.call)
    del fun  # each policy's trace takes the function again, while the program holds it
    if not found:
        return None
    policies, scan = jaxpr_facts.checkpoint_policies(traced.jaxpr)
    names = jaxpr_facts.checkpoint_names(traced.jaxpr)
    del traced
    written = replace(written, offloads=any("offload" in p for p in policies))
    variants = [written]
    offloading = [p for p in OFFLOAD_POLICIES
                  if p != "save_and_offload_only_these_names" or names]
    for policy in (*POLICIES, *offloading):
        if cancelled():
            return None
        variants.append(_variant(plan, policy, None, compile_in, names))
    chosen = choose(variants, plan.max_flops_increase)
    result = None
    diffs = [differentiation(f) for f in found]
    if chosen is not None:
        both = None
        if donation is not None and not cancelled():
            both = _variant(plan, chosen.policy, donation[1], compile_in)
        result = advice(diffs, variants, chosen, plan.max_flops_increase,
                        donation=donation[0] if donation else None, combined=both)
    return Remat(differentiations=tuple(diffs), variants=tuple(variants), advice=result,
                 current_policies=policies, uses_scan=scan,
                 max_flops_increase=plan.max_flops_increase, checkpoint_names=names,
                 offload_note=offload_note(written, policies))


def offload_note(written: RematVariant, policies: Sequence[str]) -> str | None:
    """Where the user's own policy offloads but the program holds no host memory."""
    if not written.offloads or written.host_bytes is None or written.host_bytes > 0:
        return None
    offloading = ", ".join(p for p in policies if "offload" in p)
    return (f"the offload as written ({offloading}) moves nothing: the compiled program "
            "holds no host memory, so what it offloads stays on the device or is "
            "recomputed")


def _variant(plan: RematPlan, policy: str, donated: tuple[bool, ...] | None,
             compile_in: Callable[[Callable[[], Any]], Any],
             names: Sequence[str] = ()) -> RematVariant:
    try:
        fun = plan.function()
        if fun is None:
            raise LookupError("the program let go of the function first")
        # Compiled and read only: without the arrays the function closes over.
        kept = LoweredVariant.of(*lower_with_policy(fun, plan.options, plan.call, policy,
                                                    donated, names, plan.target))
        del fun
    except Exception as e:
        return RematVariant(policy, None, None, error=described(e))
    return measure(kept.traced, kept.lowered, policy, compile_in, plan.target, plan.cache)


def plan_call(fun: Callable[..., Any], options: dict[str, Any], args: tuple[Any, ...],
              kwargs: dict[str, Any], max_flops_increase: float) -> RematPlan | None:
    """What :func:`analyse` needs of a call (its arrays as shapes); ``None`` if
    it cannot be had (the user's call succeeded; memscope must not fail it)."""
    try:
        return RematPlan(lambda: fun, options, abstract((args, kwargs)), max_flops_increase)
    except Exception:
        return None


def measure_call(plan: RematPlan, facts: CompiledFacts, view: Any, traced: TracedSource,
                 written_flops: float | None, settings: ConfigSnapshot,
                 variants: Sequence[VariantFacts], host: Host) -> Remat | None:
    """Residuals and checkpoint policies of a recorded call, measured (see
    :func:`analyse`); ``view`` is the call's traced program without its arrays,
    ``traced()`` gives it with them (for the target's compile), ``written_flops``
    the FLOPs of the program that ran (read with it); ``variants`` are its
    donation variants, the advised one measured together with the chosen
    policy. Compiles in the threads the donation variants do while the program
    runs (:meth:`~memscope.variants.donation_variants.VariantThread.compiler_for`: the lowest priority where it runs here)."""
    if not jaxpr_facts.transposes(view.jaxpr):
        return None  # no grad or vjp: nothing to trace again for
    target = host.target
    plan = replace(plan, target=target, cache=host.cache)
    flops = written_flops
    if not target.runs_here:  # the policies' FLOPs are compared with the target's
        try:
            with traced() as program:
                if program is None:
                    return Remat(differentiations=(), error=LET_GO)
                lowered = _compat.stages.without_const_args(target.lower(program))
                flops = target.flops(program, compile_to_read(
                    target, reading_view(program), lowered, cache=host.cache,
                    counted=False))
        except Exception as e:
            return Remat(differentiations=(), error=described(e))
    written = RematVariant("as_written", facts.memory.peak_bytes, flops,
                           host_bytes=facts.memory.host.peak_bytes)
    fix = next((v for v in variants if v.name == "advised" and v.facts is not None
                and not v.same_as_written), None)
    donation = (fix.setting, fix.facts.program.donated) if fix and fix.facts else None

    def compile_in(thunk: Callable[[], Any]) -> Any:
        def run() -> Any:
            with applied_config(settings):
                return thunk()
        if host.worker.draining:
            return run()
        return host.worker.compiler_for(host.target.runs_here).submit(run).result()

    try:
        # JAX's lowering warnings for programs the user never runs are not the user's.
        with host.recording_warnings(emit=False):
            result = analyse(plan, written, compile_in=compile_in, donation=donation,
                             cancelled=lambda: host.worker.cancelled)
    except Exception as e:  # the trace again failed: say so, keep the rest
        return Remat(differentiations=(), error=described(e))
    if result is not None:
        host.count_variants(compiled=len(result.variants) - 1
                            + (result.advice is not None and result.advice.combined),
                            reused=0)
        if target.flops_rule is not None:
            result = replace(result, flops_rule=target.flops_rule)
    return result
