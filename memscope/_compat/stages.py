"""What memscope reads of, and does to, JAX's stages beyond their public API:
the traced program's parameters and constants (for donation variants and
weak holding), the lowering's pruning and MLIR bindings, its compile
options and placement, hijax lowering, argument names, and the jaxpr walks.
"""

from __future__ import annotations

import contextlib
import copy
import functools
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import jax

from memscope._compat import _jax
from memscope._compat._jax import _TRACED_META_TYS, JAXPR_HOLDS_CONSTS
from memscope._compat.values import is_ref

# -------------------------------------------------------- compiled program --


@dataclass(frozen=True)
class ParameterLayout:
    """How the compiled program's non-token parameters relate to the call's leaves.

    ``kept`` lists, in parameter order, indices into ``[*hoisted_constants,
    *flat_dynamic_leaves]``: arguments pruned under ``keep_unused=False`` are
    absent, and constants JAX hoisted into arguments come first.
    """

    kept: tuple[int, ...]
    num_const_args: int
    tuple_args: bool


def parameter_layout(lowered: Any) -> ParameterLayout:
    """Read the pruning and constant-hoisting JAX applied while lowering.

    The public ``Lowered`` does not expose which arguments were pruned; the
    lowering's compile arguments hold ``kept_var_idx`` (the same set JAX uses to
    drop arguments at dispatch).
    """
    lowering = lowered._lowering
    compile_args = lowering.compile_args
    return ParameterLayout(
        kept=tuple(sorted(compile_args["kept_var_idx"])),
        num_const_args=len(getattr(lowering, "const_args", ()) or ()),
        tuple_args=bool(compile_args.get("tuple_args", False)),
    )


def mlir_ir() -> Any:
    """JAX's MLIR Python bindings, for reading a lowered module's operations and
    attributes (:func:`memscope.compiled.lowered.main_signature`). Private:
    ``jax._src.lib.mlir.ir``."""
    return _jax.ir


def op_attribute(attrs: Any, name: str) -> Any:
    """The attribute ``name`` of an operation's attributes (an ``OpAttributeMap``),
    ``None`` where it has none."""
    # ``OpAttributeMap.get`` exists only from jaxlib 0.9; ``in`` and ``[]`` work
    # on every supported jaxlib.
    return attrs[name] if name in attrs else None  # noqa: SIM401 (no .get before 0.9)


def with_donation(traced: Any, donated: tuple[bool, ...]) -> Any:
    """``traced`` (a ``jax.stages.Traced``) as if jitted with another donation.

    ``donated`` gives one flag per flat dynamic argument. JAX keeps the donation
    in the traced parameters' ``donated_invars`` (hoisted constants first, never
    donated), which is all that lowering reads of it; swapping it reuses the
    jaxpr JAX already traced, so the user's function is not traced again and
    its trace-time side effects do not repeat. (Read, not run: JAX's main
    branch after 0.11.0 adds ``fun_sourceinfo`` to ``Traced``'s constructor,
    passed on where ``Traced`` has that slot.) A hijax value is one flat
    argument here (flags per array of each, as the compiled program's leaves
    have them, become these: :func:`memscope.variants.compile.per_call_leaf`).
    """
    params = traced._params
    extra = len(params["donated_invars"]) - len(donated)
    if extra < 0:
        raise ValueError("more donation flags than the traced function has arguments")
    # A ClosedJaxpr of its own (same equations): JAX's lowering cache and the
    # compiled-executable cache behind it hold entries weakly by this object, so
    # the variant's lowering and executable are freed with the variant, instead
    # of living as long as the user's function does.
    jaxpr = params["jaxpr"]
    new_params = dict(params, jaxpr=_with_consts(jaxpr, jaxpr.consts),
                      donated_invars=(*params["donated_invars"][:extra], *donated))
    return _traced_with(traced, new_params)


def lowered_apart(lowered: Any) -> Any:
    """``lowered`` (a ``jax.stages.Lowered``) as a lowering of its own: the same
    module, parsed again. JAX's executable cache (``pxla._cached_compilation``)
    holds each compile weakly by its lowering's module, and keys it by the
    compile's options too, so a compile of JAX's own lowering with options of
    memscope's (XLA's dump) would stay there as long as the user's function
    does; a compile of this one is freed with it. It holds none of the arrays
    the program passes as constant arguments (:func:`without_const_args`).
    Private: ``Lowered._lowering`` is JAX's ``MeshComputation``, its module
    ``_hlo`` and its compiled executable ``_executable`` (JAX 0.7 to 0.12)."""
    lowering = copy.copy(lowered._lowering)
    module = lowering._hlo
    with module.context:
        lowering._hlo = _jax.ir.Module.parse(_jax.mlir.module_to_bytecode(module))
    lowering._executable = None
    apart = copy.copy(lowered)
    apart._lowering = lowering
    return without_const_args(apart)


def _with_consts(jaxpr: Any, consts: Any) -> Any:
    """A closed jaxpr of its own (the same equations) with ``consts``."""
    return (jaxpr.with_consts(list(consts)) if JAXPR_HOLDS_CONSTS
            else _jax.core.ClosedJaxpr(jaxpr.jaxpr, list(consts)))


def _traced_with(traced: Any, params: dict[str, Any], consts: Any = None) -> Any:
    """``traced`` (a ``jax.stages.Traced``) with other ``params`` (and, from 0.8,
    other hoisted ``consts``), built as the installed JAX builds one."""
    if _TRACED_META_TYS:
        source = ((traced._fun_sourceinfo,)
                  if "_fun_sourceinfo" in getattr(type(traced), "__slots__", ()) else ())
        return type(traced)(traced._meta_tys_flat, params, traced._in_tree,
                            traced.out_tree, traced._consts if consts is None else consts,
                            *source)
    # JAX 0.7: the lowering function (with the call's arguments bound) comes
    # first, and lowering passes it the params, so the new ones take effect.
    return type(traced)(traced._lfg, params, traced._in_tree, traced._out_tree,
                        traced._num_consts)


def traced_consts(traced: Any) -> tuple[list[Any], Any]:
    """The values a traced program (a ``jax.stages.Traced``) holds: its jaxpr's
    constants, and the ``Traced``'s hoisted ones from JAX 0.8 (``None`` on 0.7).
    Private: ``Traced._params["jaxpr"]`` and ``Traced._consts``."""
    hoisted = getattr(traced, "_consts", None) if _TRACED_META_TYS else None
    return list(traced._params["jaxpr"].consts), hoisted


def with_consts(traced: Any, consts: list[Any], hoisted: list[Any] | None = None) -> Any:
    """``traced`` with other jaxpr ``consts`` and (from JAX 0.8) other ``hoisted``
    ones in place of those :func:`traced_consts` reads, in a closed jaxpr of its
    own (the same equations)."""
    jaxpr = traced._params["jaxpr"]
    params = dict(traced._params, jaxpr=_with_consts(jaxpr, consts))
    return _traced_with(traced, params,
                        None if hoisted is None else type(traced._consts)(hoisted))


def without_const_args(lowered: Any) -> Any:
    """``lowered`` (a ``jax.stages.Lowered`` memscope made) holding none of the
    arrays it passes its program as constant arguments (the closed-over arrays
    JAX hoists into ``main``'s parameters, ``MeshComputation.const_args``): a
    compile needs only their types, and the executable is never called."""
    lowering: Any = getattr(lowered, "_lowering", None)
    args = getattr(lowering, "const_args", None)
    if args:
        with contextlib.suppress(AttributeError, TypeError):
            lowering.const_args = [None] * len(args)
    return lowered


class _ArgumentFacts:
    """What JAX 0.7's lowering reads of one call argument (its sharding, whether it
    is committed, its layout), without the array: see :func:`without_call_arrays`."""

    def __init__(self, x: Any) -> None:
        # (a Ref has no ndim on JAX 0.7)
        self.shape, self.dtype, self.ndim = x.shape, x.dtype, len(x.shape)
        self.sharding = x.sharding
        self._committed = getattr(x, "_committed", True)
        # JAX asks hasattr(arg, "format"): an unreadable layout is an absent one.
        with contextlib.suppress(Exception):
            self.format = x.format


def without_call_arrays(traced: Any) -> Any:
    """``traced`` holding none of the call's arrays, for work done after the call.

    JAX 0.7's ``Traced`` binds the call's arguments into its lowering function
    (``_lfg``), where lowering reads only their shardings and layouts; kept for a
    pending variant, it would keep the user's arrays (and Refs) alive. From JAX 0.8 a
    ``Traced`` holds abstract values only, and is returned as it is.
    """
    if _TRACED_META_TYS:
        return traced
    lfg = traced._lfg
    facts = [_ArgumentFacts(x) if isinstance(x, jax.Array) or is_ref(x) else x
             for x in lfg.args[0]]
    bound = functools.partial(lfg.func, facts, *lfg.args[1:], **lfg.keywords)
    return type(traced)(bound, traced._params, traced._in_tree, traced._out_tree,
                        traced._num_consts)


_hook_lock = threading.Lock()


def edit_compile_options(current_edit: Callable[[], Callable[[Any], Any] | None]) -> None:
    """From now on, each compile JAX makes takes JAX's compile options (an
    ``xla_client.CompileOptions``) as the edit ``current_edit()`` names at that
    moment returns them (``None``: as they are), before JAX's persistent cache
    key is made (which then names the edit too). JAX's Python API cannot set
    XLA's build options (:mod:`memscope.compiled.raw`). Private:
    ``compiler.compile_or_get_cached``, which pxla calls by attribute with the
    compile options fourth (JAX 0.7 to 0.12), wrapped once: a later call
    changes nothing."""
    with _hook_lock:
        original = _jax.compiler.compile_or_get_cached
        if getattr(original, "_memscope_device_memory", False):
            return

        @functools.wraps(original)
        def compile_or_get_cached(backend: Any, computation: Any, devices: Any,
                                  compile_options: Any, *args: Any, **kwargs: Any) -> Any:
            edit = current_edit()
            if edit is not None:
                compile_options = edit(compile_options)
            return original(backend, computation, devices, compile_options, *args, **kwargs)

        compile_or_get_cached._memscope_device_memory = True  # type: ignore[attr-defined]
        _jax.compiler.compile_or_get_cached = compile_or_get_cached


#: The JAX settings that JAX's ``get_compile_options`` reads into XLA's build
#: options (jax/_src/compiler.py), beside the lowered module: a compile of the
#: same module under other values may differ. A name this JAX lacks reads as absent.
COMPILE_SETTINGS = ("use_shardy_partitioner", "exec_time_optimization_effort",
                    "memory_fitting_effort", "optimization_level", "memory_fitting_level",
                    "enable_remat_opt_pass", "jax_xla_profile_version",
                    "disable_most_optimizations", "enable_pgle",
                    "default_device")  # (where an uncommitted call runs)


def module_bytecode(lowered: Any) -> bytes:
    """The lowered module with its source locations, as MLIR bytecode."""
    return _jax.mlir.module_to_bytecode(lowered.compiler_ir("stablehlo"))


def compile_settings() -> list[tuple[str, str]]:
    """The compile-time JAX settings (:data:`COMPILE_SETTINGS`) as the calling
    thread sees them, each as ``repr``."""
    return [(name, repr(getattr(getattr(_jax.config, name, None), "value", None)))
            for name in COMPILE_SETTINGS]


def compile_args(lowered: Any) -> dict[str, Any]:
    """The arguments JAX's lowering compiles with (the backend, the shardings,
    the number of devices); empty where it keeps none. Private:
    ``Lowered._lowering.compile_args``."""
    return getattr(getattr(lowered, "_lowering", None), "compile_args", None) or {}


def lowering_client(lowered: Any) -> Any:
    """The PJRT client ``lowered`` compiles with (the default backend's where it names none)."""
    return compile_args(lowered).get("backend") or jax.devices()[0].client


def sharding_devices(sharding: Any) -> tuple[Any, ...]:
    """The devices a sharding places on, in its order; none where it names none.
    Private: ``Sharding._device_assignment``."""
    return tuple(getattr(sharding, "_device_assignment", None) or ())


def lower(traced: Any) -> Any:
    """``traced.lower()`` (a ``jax.stages.Traced``), for a program over hijax
    values as the call lowers it.

    JAX's call (``pjit._to_lojax``, JAX 0.7 to 0.10) lowers the traced jaxpr
    after ``pe.convert_const_himutables``, a jaxpr of its own that JAX's caches
    hold the call's lowering and executable by; ``Traced.lower`` lowers the
    jaxpr as traced, and so compiles the program once more. And where the
    function closes over hijax values, JAX hoists them into the jaxpr's first
    arguments (``Traced._consts``), and ``Traced.lojax`` unflattens the
    arguments' lowered types, those included, with the tree of the call's own
    arguments: "Too many leaves for PyTreeDef". Lowered here as a ``Traced`` of
    the call's jaxpr whose arguments are the hoisted values and then the
    call's: the same jaxpr and parameters as the call's, so its lowering and
    executable, from JAX's caches after the call.
    """
    jaxpr = traced.jaxpr
    if not _TRACED_META_TYS or not getattr(jaxpr, "is_high", False):
        return traced.lower()
    convert = getattr(_jax.pe, "convert_const_himutables", None)
    if convert is not None:
        converted, moved = convert(jaxpr)
        if moved:  # not hoisted while tracing: JAX's own lowering says it cannot
            return traced.lower()
        jaxpr = converted
    n = traced._num_consts
    in_tree = traced._in_tree
    if n:
        args, kwargs = jax.tree_util.tree_unflatten(in_tree, [0] * in_tree.num_leaves)
        in_tree = jax.tree_util.tree_structure(((*([0] * n), *args), kwargs))
    source = ((traced._fun_sourceinfo,)
              if "_fun_sourceinfo" in getattr(type(traced), "__slots__", ()) else ())
    return type(traced)(traced._meta_tys_flat, dict(traced._params, jaxpr=jaxpr), in_tree,
                        traced.out_tree, [], *source).lower()


# ------------------------------------------------------------- signatures --


def flat_arg_names(traced: Any) -> tuple[str, ...] | None:
    """JAX's own names for the flat dynamic arguments (``opt_state[1]['w']``)."""
    info = traced.jaxpr.jaxpr.debug_info
    names = getattr(info, "arg_names", None)
    if names is None or any(n is None for n in names):
        return None
    return tuple(names)


def flat_result_paths(traced: Any) -> tuple[str, ...] | None:
    """JAX's own names for the flat results (``result[0][1]``)."""
    info = traced.jaxpr.jaxpr.debug_info
    paths = getattr(info, "result_paths", None)
    if callable(paths):  # older JAX kept them as a thunk
        paths = paths()
    if paths is None:
        return None
    return tuple(paths)


def saved_residual_listing(fun: Callable[..., Any], primals: tuple[Any, ...]
                           ) -> list[tuple[Any, str]]:
    """JAX's own listing of what differentiating ``fun`` at ``primals`` saves:
    ``(aval, text)`` per residual (:func:`memscope.variants.jaxpr_facts.saved_residuals`
    reads the words). Private: ``ad_checkpoint.saved_residuals``, public in JAX
    0.7 to 0.9; 0.10 makes only ``print_saved_residuals`` public."""
    listing: list[tuple[Any, str]] = _jax.ad_checkpoint.saved_residuals(fun, *primals)
    return listing


def lowering_rules(primitive: Any) -> list[Any]:
    """The lowering rules registered for ``primitive`` (``mlir.register_lowering``:
    for all platforms, then per platform), each as the function JAX calls
    (a ``LoweringRuleEntry``'s ``.rule``, where JAX wraps rules)."""
    tables = [_jax.mlir._lowerings, *_jax.mlir._platform_specific_lowerings.values()]
    rules = [table.get(primitive) for table in tables]
    return [getattr(rule, "rule", rule) for rule in rules if rule is not None]


def traced_donation(traced: Any) -> tuple[bool, ...]:
    """The flat donation a ``jax.stages.Traced`` was jitted with (hoisted
    constants first, never donated; see :func:`with_donation`)."""
    return tuple(traced._params["donated_invars"])


def all_eqns(jaxpr: Any) -> Iterator[Any]:
    """Every equation of ``jaxpr`` (open or closed) and of the jaxprs inside it."""
    jaxpr = getattr(jaxpr, "jaxpr", jaxpr)  # a ClosedJaxpr's open jaxpr
    for eqn in jaxpr.eqns:
        yield eqn
        for sub in _jax.core.jaxprs_in_params(eqn.params):
            yield from all_eqns(sub)


def eval_jaxpr(closed: Any, *args: Any) -> list[Any]:
    """Evaluate ``closed`` (a closed jaxpr) at ``args``, binding each equation
    under its own source info. Private: ``core.eval_jaxpr`` (JAX 0.7 to 0.12)."""
    out: list[Any] = _jax.core.eval_jaxpr(closed.jaxpr, closed.consts, *args)
    return out
