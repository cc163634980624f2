"""What capturing hooks and reads of JAX on the program's own path: the ``jax.jit`` hook,
pmap, tracing state, the lowering's warnings, the per-thread settings, the
jit options JAX resolved, compile-time events, and the reverse-mode hook.

What of it capturing needs is checked once, before anything runs
(:func:`capture_problem`): a failure there would be the program's.
"""

from __future__ import annotations

import contextlib
import functools
import os
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import jax

from memscope._compat import _jax
from memscope._compat._jax import (
    _JAX_SERIES,
    JAX_VERSION,
    REPORT_TO,
    _private,
)

T = TypeVar("T")

#: What capturing reads on the program's own path (at each ``jax.jit`` made and
#: each call). A failure there would be the program's, so where one is missing
#: memscope refuses to start instead (:func:`capture_problem`).
_NEEDED_TO_CAPTURE: tuple[tuple[str, Any, tuple[str, ...]], ...] = (
    ("jax._src.pjit", _jax.pjit, ("make_jit",)),
    ("jax._src.core", _jax.core, ("trace_state_clean", "Tracer")),
    ("jax._src.config", _jax.config, ("disable_jit", "config_states", "config_ext", "State",
                                  "StateContextManager")),
    ("jax._src.interpreters.mlir", _jax.mlir, ("warnings",)),
    ("jax._src.linear_util", _jax.linear_util, ("WrappedFun",)),
    ("jax._src.xla_bridge", _jax.xla_bridge, ("backends_are_initialized",)),
)


def capture_problem() -> str | None:
    """Why memscope cannot capture on this JAX, as one line naming each private
    attribute it needs and this JAX lacks; ``None`` when all are there."""
    missing = []
    for module_name, module, names in _NEEDED_TO_CAPTURE:
        missing += [f"{module_name}.{name}" for name in names if not hasattr(module, name)]
    if not missing:
        try:
            thread_settings()
        except Exception as e:
            missing.append(f"jax._src.config's settings ({type(e).__name__}: {e})")
    if not missing:
        return None
    return (f"memscope cannot capture on JAX {JAX_VERSION}: this JAX has no "
            f"{', '.join(missing)}, which memscope reads to see each jitted call (report "
            f"it to {REPORT_TO})")


# ---------------------------------------------------------------- capture --


@contextlib.contextmanager
def patched_make_jit(wrap: Callable[[Any, Callable[..., Any], dict[str, Any]], Any]
                     ) -> Iterator[None]:
    """Route every ``jax.jit`` made inside the block through ``wrap(jitted, fun, options)``.

    ``jax.jit`` in all its spellings (decorator, decorator factory, ``from jax
    import jit``, ``functools.partial(jax.jit, ...)``) and ``pjit`` build their
    object with ``pjit.make_jit``, looked up as a module attribute at call time.
    Replacing that one attribute therefore reaches jits created anywhere after
    this point, including inside libraries the target imports later.
    """
    original = _jax.pjit.make_jit

    def make_jit(fun: Callable[..., Any], **options: Any) -> Any:
        return wrap(original(fun, **options), fun, options)

    _jax.pjit.make_jit = make_jit
    try:
        yield
    finally:
        _jax.pjit.make_jit = original


@contextlib.contextmanager
def patched_eval_shape(unwrap: Callable[[Any], Any]) -> Iterator[None]:
    """Within the block, ``jax.eval_shape(f, ...)`` sees ``unwrap(f)``: JAX takes
    its own path for a jit object only where ``type(f) is PjitFunction``
    (``api.eval_shape``, 0.7 to 0.12), so given memscope's stand-in it would jit
    it again and trace the user's function a second time (its trace-time prints,
    JAX's tracing-cache counts). ``unwrap`` gives the jit object a stand-in
    stands for, anything else as it is."""
    api = _jax.api
    original: Any = getattr(api, "eval_shape", None)
    if original is None or getattr(jax, "eval_shape", None) is not original:
        yield  # a JAX that moved it: left as it is
        return

    real: Callable[..., Any] = original  # type: ignore[assignment]  # (None returned above)

    @functools.wraps(real)
    def eval_shape(fun: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        return real(unwrap(fun), *args, **kwargs)

    api.eval_shape = jax.eval_shape = eval_shape
    try:
        yield
    finally:
        api.eval_shape = jax.eval_shape = real


def make_jit(fun: Callable[..., Any], options: dict[str, Any]) -> Any:
    """A jit object made as the one with ``options`` was (the keywords
    :func:`patched_make_jit` hands its ``wrap``: ``pjit.make_jit``'s own, which
    ``jax.jit``'s signature does not take); no options: ``jax.jit``'s defaults."""
    return _jax.pjit.make_jit(fun, **options) if options else jax.jit(fun)


def pmap_user_function(fun: Any) -> Callable[..., Any] | None:
    """The user's function behind a jit that ``jax.pmap`` made, else ``None``.

    From JAX 0.8, ``pmap`` jits ``shard_map(_fun)``, where ``_fun`` (in
    ``jax._src.pmap``) closes over the user's function as a ``lu.WrappedFun``.
    JAX 0.7 with ``jax_pmap_shmap_merge`` set jits ``shard_map`` of the
    ``lu.WrappedFun``'s ``call_wrapped`` (in ``jax._src.shard_map``).
    """
    inner = getattr(fun, "__wrapped__", None)
    if getattr(inner, "__module__", None) == "jax._src.pmap":
        for cell in getattr(inner, "__closure__", None) or ():
            try:
                value = cell.cell_contents
            except ValueError:  # an empty cell
                continue
            if isinstance(value, _jax.linear_util.WrappedFun):
                return _innermost(value)
        return None
    owner = getattr(inner, "__self__", None)  # 0.7: a bound WrappedFun.call_wrapped
    if isinstance(owner, _jax.linear_util.WrappedFun):
        return _innermost(owner)
    return None


def exclude_from_source_info(folder: str) -> None:
    """Make JAX skip frames in ``folder`` when it records an op's source line, as it
    skips its own: a jitted call made through memscope's stand-in is then
    attributed to the user's (or library's) line, exactly as without memscope.
    Equinox and Flax register their own folders the same way. JAX keeps each
    folder it is given, once more for each call. Private:
    ``source_info_util.register_exclusion``."""
    source_info_util = _private("jax._src", "source_info_util")
    register = getattr(source_info_util, "register_exclusion", None)
    if register is not None:
        register(os.path.join(os.path.abspath(folder), ""))


def _innermost(wrapped: Any) -> Callable[..., Any]:
    user: Callable[..., Any] = wrapped.f
    return user


def pmap_captured() -> bool:
    """True when ``jax.pmap`` runs through ``jax.jit`` here, so memscope sees it
    (see :data:`PMAP_THROUGH_JIT_DEFAULT`)."""
    flag = getattr(_jax.config, "pmap_shmap_merge", None)  # gone in JAX 0.10: always
    return True if flag is None else bool(flag.value)


@contextlib.contextmanager
def pmap_outside_jit(compiled: Callable[[], None]) -> Iterator[None]:
    """Call ``compiled()`` each time ``jax.pmap`` compiles outside ``jax.jit``.

    That is JAX 0.7's default (``jax_pmap_shmap_merge`` off): its pmap path
    looks up ``pxla.xla_pmap_impl_lazy`` at each cache miss, once per new
    signature. memscope cannot read those programs; it can say they ran.
    JAX 0.10 has no such path (pmap always goes through ``jax.jit``).
    """
    pxla: Any = _jax.pxla  # the attribute exists in JAX 0.7 to 0.9 only
    original = getattr(pxla, "xla_pmap_impl_lazy", None)
    if original is None:
        yield
        return

    def lazy(*args: Any, **kwargs: Any) -> Any:
        if not pmap_captured():
            compiled()
        return original(*args, **kwargs)

    pxla.xla_pmap_impl_lazy = lazy
    try:
        yield
    finally:
        pxla.xla_pmap_impl_lazy = original


def is_top_level_call() -> bool:
    """True when a call to a jitted function will execute, not be staged.

    Inside ``jit``, ``grad``, ``vmap`` or ``scan`` tracing the trace state is not
    clean, and under ``jax.disable_jit`` nothing is compiled at all.
    """
    return _jax.core.trace_state_clean() and not _jax.config.disable_jit.value


@contextlib.contextmanager
def lowering_warnings(replace: Callable[[Any], T]) -> Iterator[T]:
    """For the block, JAX's MLIR lowering (``mlir.warnings``, where it warns "Some
    donated buffers were not usable") uses ``replace(warnings)`` as its
    ``warnings`` module."""
    real = _jax.mlir.warnings
    proxy = replace(real)
    _jax.mlir.warnings = proxy
    try:
        yield proxy
    finally:
        _jax.mlir.warnings = real


@functools.cache
def thread_settings() -> tuple[Any, ...]:
    """JAX's per-thread settings: every option (``State``) and the mesh and device
    contexts (plain ``Config`` objects of the same kind, outside ``config_states``);
    each one's ``.value`` is as the calling thread sees it."""
    return tuple({id(c): c for c in (
        *_jax.config.config_states.values(),
        *(v for v in vars(_jax.config).values() if isinstance(v, _jax.config.config_ext.Config)),
    )}.values())


@contextlib.contextmanager
def set_for_thread(setting: Any, value: Any) -> Iterator[None]:
    """``setting`` (one of :func:`thread_settings`) set to ``value`` for this
    thread only, in the block."""
    if isinstance(setting, _jax.config.State):  # runs the option's own hooks too
        with _jax.config.StateContextManager(setting, value):
            yield
        return
    previous = setting.swap_local(value)
    try:
        yield
    finally:
        setting.set_local(previous)


def backends_initialized() -> bool:
    """True once JAX has started its backends (asking for devices starts them)."""
    return bool(_jax.xla_bridge.backends_are_initialized())


def is_jit_object(obj: Any) -> bool:
    """True for what ``jax.jit`` returns (it carries the ``_jit_info`` JAX resolved)."""
    return callable(obj) and hasattr(obj, "_jit_info")


def jit_options(jitted: Any) -> dict[str, Any]:
    """The options JAX resolved when the jit object was made, by name.

    JAX resolves static and donated names to positions (and back) from the
    function's signature once, at ``jax.jit`` time, and keeps the result in
    ``_jit_info`` (a ``PjitInfo``); reading it there gives exactly JAX's
    interpretation."""
    info = jitted._jit_info
    return {name: getattr(info, name) for name in info._fields}


def remove_duration_listener(listener: Callable[..., None]) -> None:
    """Stop hearing JAX's monitoring duration events (compile times), heard
    through the public ``jax.monitoring``. JAX 0.8 named the remover privately
    (``_unregister_event_duration_listener_by_callback``); 0.7, 0.9 and later
    publicly."""
    monitoring = _private("jax._src", "monitoring")
    remove = getattr(monitoring, "unregister_event_duration_listener", None) or getattr(
        monitoring, "_unregister_event_duration_listener_by_callback", None)
    if remove is not None:
        with contextlib.suppress(Exception):
            remove(listener)


# ------------------------------------------------------ differentiation --

#: JAX 0.10 made ``jax.grad`` and ``jax.value_and_grad`` call ``api.vjp`` (the
#: public ``jax.vjp``) with a Python callable; before, all three go through
#: ``api._vjp`` with a ``lu.WrappedFun``.
_VJP_TAKES_CALLABLE: bool = _JAX_SERIES >= (0, 10)

#: ``replacement_for(fun, primals, has_aux)``: a callable to differentiate in
#: ``fun``'s place, or ``None`` for ``fun`` itself (see :func:`vjp_replaced`)
VjpReplacement = Callable[[Callable[..., Any], tuple[Any, ...], bool],
                          "Callable[..., Any] | None"]


@contextlib.contextmanager
def vjp_replaced(replacement_for: VjpReplacement) -> Iterator[None]:
    """Hand every reverse-mode differentiation traced in the block, on any
    thread, to ``replacement_for(fun, primals, has_aux)`` first; a callable it
    returns is differentiated in ``fun``'s place.

    ``jax.grad``, ``jax.value_and_grad``, ``jax.vjp`` and the framework wrappers
    over them (``eqx.filter_value_and_grad``, ``nnx.grad``) all reach one
    private entry point (see :data:`_VJP_TAKES_CALLABLE`), looked up as a module
    attribute at call time, so differentiations set up anywhere (at import, in
    a library) are seen.
    """
    name = "vjp" if _VJP_TAKES_CALLABLE else "_vjp"
    original = getattr(_jax.api, name)

    @functools.wraps(original)
    def hooked(fun: Any, *primals: Any, has_aux: bool = False, **kwargs: Any) -> Any:
        if _VJP_TAKES_CALLABLE:
            new = replacement_for(fun, primals, has_aux)
            return original(new or fun, *primals, has_aux=has_aux, **kwargs)
        new = replacement_for(fun.call_wrapped, primals, has_aux)
        if new is not None:
            fun = _jax.linear_util.wrap_init(new, debug_info=fun.debug_info)
        return original(fun, *primals, has_aux=has_aux, **kwargs)

    public = jax.vjp is original
    setattr(_jax.api, name, hooked)
    if public:
        jax.vjp = hooked
    try:
        yield
    finally:
        setattr(_jax.api, name, original)
        if public:
            jax.vjp = original


def default_device() -> Any:
    """The device a call runs on when no argument commits it to one: the
    ``jax_default_device`` setting's where set, else the default backend's first
    local device (``pxla.get_default_device``, JAX 0.7 to 0.10)."""
    return _jax.pxla.get_default_device()
