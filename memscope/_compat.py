"""Every JAX-version difference and every private JAX attribute memscope uses.

Nothing outside this module touches ``jax._src``. Each function says why it needs
what it reaches for, so that a JAX upgrade is a review of this one file.

Why one file of about 1,900 lines, over the house's 600: its one reason to change
is a JAX release, and the review that release needs is of every private
attribute together (docs/versions.md lists them by series). Its sections (the
version flags, the jit hook, stages and lowering, Refs, hijax values, buffers
and addresses, remat and policies, the settings snapshot) each say which JAX
internals they read. The version rules that need no JAX live apart, in
``memscope._versions`` (read before the program imports JAX). Split by topic, the
same review would span several files, and the tests that stand in for another
JAX (``monkeypatch.setattr(_compat, ...)``) would have to know which.

A private module or attribute that a newer JAX moved must not break the user's
program: the private modules are imported through :func:`_private`, so this
module imports on any JAX, and what is missing raises :class:`JaxInternalMissing`
where it is used. What capturing needs on the program's own path is checked
once, before anything runs (:func:`capture_problem`); the rest is read off the
program's path, where a failure is that function's ``error`` in the report.
"""

from __future__ import annotations

import contextlib
import copy
import functools
import importlib
import os
import threading
import weakref
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import jax
import jaxlib
import numpy as np

JAX_VERSION: str = jax.__version__
JAXLIB_VERSION: str = getattr(jaxlib, "__version__", None) or jaxlib.version.__version__

#: Packages whose own jitted helpers are JAX internals, not the user's functions.
JAX_PACKAGES = ("jax", "jaxlib")


# --------------------------------------------------------------- versions --

# The version rules live in memscope._versions (read before JAX is imported).
from memscope._versions import (  # noqa: E402, I001  (re-exported)
    ALLOW_UNSUPPORTED_ENV as ALLOW_UNSUPPORTED_ENV,
    REPORT_TO as REPORT_TO,
    SUPPORTED_SERIES as SUPPORTED_SERIES,
    newer_than_verified as newer_than_verified,
    series as series,
    support_problem as support_problem,
    unsupported_allowed as unsupported_allowed,
    unverified_line as unverified_line,
    unverified_note as unverified_note,
)


_JAX_SERIES = series(JAX_VERSION) or (0, 0)

#: JAX 0.8 added a second pass to ``mlir._set_up_aliases``: a donated argument
#: left unmatched is offered to XLA as a buffer donor when an unmatched output
#: has its element count. On 0.7 such an argument is "not usable".
SAME_SIZE_DONORS: bool = _JAX_SERIES >= (0, 8)
#: jaxlib 0.10 runs programs with host memory kinds (``pinned_host`` arguments
#: and outputs) on XLA:CPU; 0.7 to 0.9 compile them but fail at the call ("No
#: registered implementation for ... annotate_device_placement for Host").
CPU_RUNS_HOST_MEMORY_KINDS: bool = _JAX_SERIES >= (0, 10)
#: JAX 0.8 made ``Traced(meta_tys_flat, params, in_tree, out_tree, consts)``; 0.7
#: has ``Traced(lfg, params, in_tree, out_tree, num_consts)``.
_TRACED_META_TYS: bool = _JAX_SERIES >= (0, 8)
#: From JAX 0.8, ``jax.pmap`` is a ``jax.jit`` of ``shard_map`` (``jax_pmap_shmap_merge``
#: on by default; JAX 0.10 removed the flag); on 0.7 it compiles outside
#: ``jax.jit`` unless that flag is set.
PMAP_THROUGH_JIT_DEFAULT: bool = _JAX_SERIES >= (0, 8)
#: JAX 0.11 merged ``ClosedJaxpr`` into ``Jaxpr``: a jaxpr carries its constants
#: (``consts``), ``with_consts`` copies it, ``.jaxpr`` is the jaxpr itself and
#: ``ClosedJaxpr`` is an alias kept for old callers (read, not run:
#: docs/versions.md).
JAXPR_HOLDS_CONSTS: bool = _JAX_SERIES >= (0, 11)

_JAXLIB_SERIES = series(JAXLIB_VERSION) or (0, 0)

# JAX's allocator settings on a GPU, as jaxlib's ``generate_pjrt_gpu_plugin_options``
# (jaxlib/xla_client.py) reads them for the CUDA plugin. Read alike in jaxlib 0.7 to
# 0.12 (the 0.7.2, 0.8.0 to 0.8.3, 0.9.0 to 0.9.2, 0.10.2, 0.11.0, 0.11.2 and 0.12.0.1
# wheels compared): ``XLA_CLIENT_MEM_FRACTION``, else the older
# ``XLA_PYTHON_CLIENT_MEM_FRACTION`` (both set: ValueError), as ``float()``, unset
# where empty; ``XLA_PYTHON_CLIENT_PREALLOCATE`` off for "false", "False" or "0";
# ``XLA_PYTHON_CLIENT_ALLOCATOR`` lower-cased, one of the names below (else
# ValueError), which is all that differs between series.
#: jaxlib 0.10 accepts ``XLA_PYTHON_CLIENT_ALLOCATOR=vmm`` (XLA's VMM allocator).
GPU_ALLOCATOR_VMM: bool = _JAXLIB_SERIES >= (0, 10)
#: jaxlib 0.11 accepts ``XLA_PYTHON_CLIENT_ALLOCATOR=address``.
GPU_ALLOCATOR_ADDRESS: bool = _JAXLIB_SERIES >= (0, 11)
#: The ``XLA_PYTHON_CLIENT_ALLOCATOR`` values the installed jaxlib accepts.
GPU_ALLOCATORS: tuple[str, ...] = ("default", "platform", "bfc", "cuda_async",
                                   *(("vmm",) if GPU_ALLOCATOR_VMM else ()),
                                   *(("address",) if GPU_ALLOCATOR_ADDRESS else ()))


# ------------------------------------------------------ private modules --


class JaxInternalMissing(AttributeError):
    """A private JAX module or attribute memscope reads is not in the installed
    JAX. An ``AttributeError``, so ``getattr(module, name, default)`` still
    gives the default."""


class _Missing:
    """Stands in for a private JAX module that did not import: any attribute
    read says which, and on which JAX."""

    def __init__(self, name: str, error: BaseException) -> None:
        self._name = name
        self._error = f"{type(error).__name__}: {error}"

    def __getattr__(self, attr: str) -> Any:
        if attr.startswith("__"):  # copy, pickle and friends probing for hooks
            raise AttributeError(attr)
        raise JaxInternalMissing(f"memscope cannot read {self._name}.{attr} on JAX "
                                 f"{JAX_VERSION}: {self._name} did not import ({self._error})")


def _private(package: str, name: str) -> Any:
    """``from package import name`` for a private JAX module, or a :class:`_Missing`
    stand-in where this JAX has moved it."""
    try:
        module = importlib.import_module(package)
        found = getattr(module, name, None)
        return found if found is not None else importlib.import_module(f"{package}.{name}")
    except Exception as e:
        return _Missing(f"{package}.{name}", e)


_config: Any = _private("jax._src", "config")
_core: Any = _private("jax._src", "core")
_linear_util: Any = _private("jax._src", "linear_util")
_pjit: Any = _private("jax._src", "pjit")
_xla_bridge: Any = _private("jax._src", "xla_bridge")
_mlir: Any = _private("jax._src.interpreters", "mlir")
_pxla: Any = _private("jax._src.interpreters", "pxla")
_pe: Any = _private("jax._src.interpreters", "partial_eval")
_ir: Any = _private("jax._src.lib.mlir", "ir")
_xla_client: Any = _private("jax._src.lib", "xla_client")
_compiler: Any = _private("jax._src", "compiler")
_state_types: Any = _private("jax._src.state", "types")
_ad_checkpoint: Any = _private("jax._src", "ad_checkpoint")
_api: Any = _private("jax._src", "api")

#: What capturing reads on the program's own path (at each ``jax.jit`` made and
#: each call). A failure there would be the program's, so where one is missing
#: memscope refuses to start instead (:func:`capture_problem`).
_NEEDED_TO_CAPTURE: tuple[tuple[str, Any, tuple[str, ...]], ...] = (
    ("jax._src.pjit", _pjit, ("make_jit",)),
    ("jax._src.core", _core, ("trace_state_clean", "Tracer")),
    ("jax._src.config", _config, ("disable_jit", "config_states", "config_ext", "State",
                                  "StateContextManager")),
    ("jax._src.interpreters.mlir", _mlir, ("warnings",)),
    ("jax._src.linear_util", _linear_util, ("WrappedFun",)),
    ("jax._src.xla_bridge", _xla_bridge, ("backends_are_initialized",)),
)


def capture_problem() -> str | None:
    """Why memscope cannot capture on this JAX, as one line naming each private
    attribute it needs and this JAX lacks; ``None`` when all are there."""
    missing = []
    for module_name, module, names in _NEEDED_TO_CAPTURE:
        missing += [f"{module_name}.{name}" for name in names if not hasattr(module, name)]
    if not missing:
        try:
            _thread_settings()
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
    original = _pjit.make_jit

    def make_jit(fun: Callable[..., Any], **options: Any) -> Any:
        return wrap(original(fun, **options), fun, options)

    _pjit.make_jit = make_jit
    try:
        yield
    finally:
        _pjit.make_jit = original


@contextlib.contextmanager
def patched_eval_shape(unwrap: Callable[[Any], Any]) -> Iterator[None]:
    """Within the block, ``jax.eval_shape(f, ...)`` sees ``unwrap(f)``: JAX takes
    its own path for a jit object only where ``type(f) is PjitFunction``
    (``api.eval_shape``, 0.7 to 0.12), so given memscope's stand-in it would jit
    it again and trace the user's function a second time (its trace-time prints,
    JAX's tracing-cache counts). ``unwrap`` gives the jit object a stand-in
    stands for, anything else as it is."""
    api = _api
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
    return _pjit.make_jit(fun, **options) if options else jax.jit(fun)


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
            if isinstance(value, _linear_util.WrappedFun):
                return _innermost(value)
        return None
    owner = getattr(inner, "__self__", None)  # 0.7: a bound WrappedFun.call_wrapped
    if isinstance(owner, _linear_util.WrappedFun):
        return _innermost(owner)
    return None


def exclude_from_source_info(folder: str) -> None:
    """Make JAX skip frames in ``folder`` when it records an op's source line, as it
    skips its own: a jitted call made through memscope's stand-in is then
    attributed to the user's (or library's) line, exactly as without memscope.
    Equinox and Flax register their own folders the same way."""
    source_info_util = _private("jax._src", "source_info_util")
    path = os.path.join(os.path.abspath(folder), "")
    with _exclusion_lock:
        if path in _excluded:
            return
        _excluded.add(path)
    register = getattr(source_info_util, "register_exclusion", None)
    if register is not None:
        register(path)


_excluded: set[str] = set()
_exclusion_lock = threading.Lock()


def _innermost(wrapped: Any) -> Callable[..., Any]:
    user: Callable[..., Any] = wrapped.f
    return user


def pmap_captured() -> bool:
    """True when ``jax.pmap`` runs through ``jax.jit`` here, so memscope sees it
    (see :data:`PMAP_THROUGH_JIT_DEFAULT`)."""
    flag = getattr(_config, "pmap_shmap_merge", None)  # gone in JAX 0.10: always
    return True if flag is None else bool(flag.value)


@contextlib.contextmanager
def pmap_outside_jit(compiled: Callable[[], None]) -> Iterator[None]:
    """Call ``compiled()`` each time ``jax.pmap`` compiles outside ``jax.jit``.

    That is JAX 0.7's default (``jax_pmap_shmap_merge`` off): its pmap path
    looks up ``pxla.xla_pmap_impl_lazy`` at each cache miss, once per new
    signature. memscope cannot read those programs; it can say they ran.
    JAX 0.10 has no such path (pmap always goes through ``jax.jit``).
    """
    pxla: Any = _pxla  # the attribute exists in JAX 0.7 to 0.9 only
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
    return _core.trace_state_clean() and not _config.disable_jit.value


def is_concrete_call(leaves: Any) -> bool:
    """True when a call (or an ahead-of-time stage) with these flat ``leaves``
    runs at the top level on concrete values: what memscope records.

    Anything else is staged into an enclosing trace (``jit``, ``grad``,
    ``eval_shape``, a ``scan`` or ``while_loop`` body), or holds tracers that
    leaked into a call at the top level (``ensure_compile_time_eval``), and
    passes through to JAX untouched: a tracer has no ``sharding``, no buffer
    and no address to read.
    """
    return is_top_level_call() and not any(is_tracer(x) for x in leaves)


def is_tracer(x: Any) -> bool:
    """True for a value being traced: a ``jax.Array`` by ``isinstance``, yet with
    no buffer, sharding or deletion state to read."""
    return isinstance(x, _core.Tracer)


def executable_fingerprint(compiled: Any) -> bytes | str | None:
    """The XLA executable's fingerprint (``PjRtLoadedExecutable.fingerprint``):
    equal for the same program compiled alike, whichever jit object compiled it;
    ``None`` where the backend gives none. A few microseconds."""
    try:
        value = compiled.runtime_executable().fingerprint
    except Exception:
        return None
    return value if isinstance(value, bytes | str) and value else None


def executable_id(compiled: Any) -> int | None:
    """The ``id`` of the XLA executable JAX runs for ``compiled``; ``None`` where
    it cannot be read.

    JAX serves some new signatures of a jit object with an executable it
    already has (a NumPy array where a ``jax.Array`` was, for one: a new entry
    of its dispatch cache, but no trace, lowering or compile): then this is the
    same as that signature's (beside :func:`executable_fingerprint`, which
    guards it against an executable freed and another made at its address)."""
    try:
        return id(compiled.runtime_executable())
    except Exception:
        return None


class _WarningsProxy:
    """Stands in for the ``warnings`` module inside JAX's MLIR lowering.

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


@contextlib.contextmanager
def lowering_warnings() -> Iterator[_WarningsProxy]:
    """Install the warnings proxy in JAX's lowering module for the block."""
    proxy = _WarningsProxy(_mlir.warnings)
    _mlir.warnings = proxy
    try:
        yield proxy
    finally:
        _mlir.warnings = proxy._real


ConfigSnapshot = tuple[tuple[Any, Any], ...]


@functools.cache
def _thread_settings() -> tuple[Any, ...]:
    """JAX's per-thread settings: every option (``State``) and the mesh and device
    contexts (plain ``Config`` objects of the same kind, outside ``config_states``)."""
    return tuple({id(c): c for c in (
        *_config.config_states.values(),
        *(v for v in vars(_config).values() if isinstance(v, _config.config_ext.Config)),
    )}.values())


def config_snapshot() -> ConfigSnapshot:
    """Every JAX setting as the calling thread sees it.

    JAX keeps ``with jax.enable_x64(...)`` and ``with jax.sharding.use_mesh(...)``
    settings per thread, and its lowering reads them; memscope's worker lowers a
    call's variants under the values the call itself ran with
    (:func:`applied_config`).
    """
    return tuple((setting, setting.value) for setting in _thread_settings())


@contextlib.contextmanager
def applied_config(snapshot: ConfigSnapshot) -> Iterator[None]:
    """Set, for this thread only, each value of ``snapshot`` that differs here."""
    with contextlib.ExitStack() as stack:
        for setting, value in snapshot:
            if not _same(setting.value, value):
                stack.enter_context(_thread_local(setting, value))
        yield


def _same(a: Any, b: Any) -> bool:
    try:
        return a is b or bool(a == b)
    except Exception:  # values without a plain equality (arrays)
        return False


@contextlib.contextmanager
def _thread_local(setting: Any, value: Any) -> Iterator[None]:
    if isinstance(setting, _config.State):  # runs the option's own hooks too
        with _config.StateContextManager(setting, value):
            yield
        return
    previous = setting.swap_local(value)
    try:
        yield
    finally:
        setting.set_local(previous)


def backends_initialized() -> bool:
    """True once JAX has started its backends (asking for devices starts them)."""
    return bool(_xla_bridge.backends_are_initialized())


def buffer_failure(x: Any, *, wait: bool = False) -> Exception | None:
    """The error ``x``'s computation ended in; ``None`` when it did not, or when it
    is still running and ``wait`` is false.

    An array whose computation failed holds the error instead of a buffer, and
    reading its address aborts the process (``Check failed:
    buffer_.IsConcrete()``). A ready array is checked at once; the error, caught
    here, stays in the array for the program to meet where it would have
    without memscope.
    """
    x = _physical(x)
    try:
        if wait or x.is_ready():
            x.block_until_ready()  # at once when ready; raises the error it holds
    except Exception as e:  # the computation's own error, held by the array
        return e
    return None


def _physical(x: Any) -> Any:
    # A PRNG key array holds its buffer in a uint32 array of its own.
    return getattr(x, "_base_array", x)


def is_ready(x: Any) -> bool:
    """``x.is_ready()``: its computation has ended (a key array's, of its data)."""
    return bool(_physical(x).is_ready())


def allocated_late(x: Any) -> bool:
    """True when ``x``, a pending array on CPU, may have no buffer yet: XLA:CPU
    allocates a call's outputs only when the call runs on jaxlib 0.10 always
    (``PjRtCpuClient::AllocateRawBufferForExecute`` makes delayed memory), and
    on the other series where an input was pending or, on a loaded machine,
    where the call was queued (seen on 0.7).
    Reading the address of such a buffer before it exists, or of one whose
    allocation failed (RESOURCE_EXHAUSTED), aborts the process (``Check
    failed: buffer_.IsConcrete()``)."""
    x = _physical(x)
    return not x.is_ready() and any(d.platform == "cpu" for d in x.devices())


def no_buffer(x: Any, *, wait: bool = False) -> bool:
    """True where ``x``'s buffer address must not be read now: it may not exist
    yet (:func:`allocated_late`), or its computation failed (the error stays in
    the array for the program). ``wait``: such an array is waited for first
    (a first call's inputs and outputs, once per signature); otherwise it is
    not read (waiting would move where the program meets its own errors)."""
    pending = allocated_late(x)
    if pending and not wait:
        return True
    return buffer_failure(x, wait=pending) is not None


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


AttrValue = bool | int | str


def _attr_value(attr: Any) -> AttrValue:
    # These bindings hand back attributes already downcast to their Python class.
    if isinstance(attr, _ir.BoolAttr):
        return bool(attr.value)
    if isinstance(attr, _ir.IntegerAttr):
        return int(attr.value)
    if isinstance(attr, _ir.StringAttr):
        return str(attr.value)
    return str(attr)


def _attr_dicts(array_attr: Any, count: int) -> tuple[dict[str, AttrValue], ...]:
    if array_attr is None:
        return tuple({} for _ in range(count))
    dicts = []
    for entry in array_attr:
        d: Any = _ir.DictAttr(entry)  # iterable at runtime; the stubs do not say so
        dicts.append({named.name: _attr_value(named.attr) for named in d})
    return tuple(dicts)


@dataclass(frozen=True)
class MainSignature:
    """Attributes JAX put on the arguments and results of the lowered ``main``.

    ``tf.aliasing_output`` (a fixed alias), ``jax.buffer_donor`` (an optional
    donation left to XLA) and ``jax.token`` (an effect token) are JAX's request
    to the compiler, before XLA decides anything.
    """

    args: tuple[dict[str, AttrValue], ...]
    results: tuple[dict[str, AttrValue], ...]


def _attribute(attrs: Any, name: str) -> Any:
    # ``OpAttributeMap.get`` exists only from jaxlib 0.9; ``in`` and ``[]`` work
    # on every supported jaxlib.
    return attrs[name] if name in attrs else None  # noqa: SIM401 (no .get before 0.9)


def main_signature(lowered: Any) -> MainSignature:
    """Read the argument and result attributes of ``main`` from the StableHLO module."""
    module = lowered.compiler_ir("stablehlo")
    with module.context:
        for op in module.body.operations:
            if op.operation.name != "func.func":
                continue
            if _ir.StringAttr(op.attributes["sym_name"]).value != "main":
                continue
            ftype = _ir.FunctionType(_ir.TypeAttr(op.attributes["function_type"]).value)
            attrs = op.attributes
            return MainSignature(
                args=_attr_dicts(_attribute(attrs, "arg_attrs"), len(ftype.inputs)),
                results=_attr_dicts(_attribute(attrs, "res_attrs"), len(ftype.results)),
            )
    raise LookupError("the lowered module has no main function")


def with_donation(traced: Any, donated: tuple[bool, ...]) -> Any:
    """``traced`` (a ``jax.stages.Traced``) as if jitted with another donation.

    ``donated`` gives one flag per flat dynamic argument. JAX keeps the donation
    in the traced parameters' ``donated_invars`` (hoisted constants first, never
    donated), which is all that lowering reads of it; swapping it reuses the
    jaxpr JAX already traced, so the user's function is not traced again and
    its trace-time side effects do not repeat. (Read, not run: JAX's main
    branch after 0.11.0 adds ``fun_sourceinfo`` to ``Traced``'s constructor,
    passed on where ``Traced`` has that slot.) Over hijax values, ``donated``
    has one flag per array of each (:func:`high_layout`), as the compiled
    program's leaves do; a hijax value is donated where its arrays are.
    """
    donated = _per_call_leaf(traced, donated)
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
        lowering._hlo = _ir.Module.parse(_mlir.module_to_bytecode(module))
    lowering._executable = None
    apart = copy.copy(lowered)
    apart._lowering = lowering
    return without_const_args(apart)


def _with_consts(jaxpr: Any, consts: Any) -> Any:
    """A closed jaxpr of its own (the same equations) with ``consts``."""
    return (jaxpr.with_consts(list(consts)) if JAXPR_HOLDS_CONSTS
            else _core.ClosedJaxpr(jaxpr.jaxpr, list(consts)))


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


def _per_call_leaf(traced: Any, donated: tuple[bool, ...]) -> tuple[bool, ...]:
    """Flags per array of the compiled program's call leaves, as flags per flat
    leaf of the call: ``jax.jit`` donates whole arguments, so all or none of a
    hijax value's arrays (one with no array is not donated)."""
    layout = high_layout(traced)
    if layout is None:
        return donated
    flags, start = [], 0
    for value in layout.inputs:
        flags.append(any(donated[start:start + len(value.lo)]))
        start += len(value.lo)
    if start != len(donated):
        raise ValueError("the donation flags do not match the program's arrays")
    return tuple(flags)


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


@contextlib.contextmanager
def compile_options_edited(edit: Callable[[Any], Any]) -> Iterator[None]:
    """Within the block, each compile this thread makes takes JAX's compile options
    (an ``xla_client.CompileOptions``) as ``edit`` returns them, before JAX's
    persistent cache key is made (which then names the edit too). JAX's Python
    API cannot set XLA's build options (:mod:`memscope.compiled.raw`). Private:
    ``compiler.compile_or_get_cached``, which pxla calls by attribute with the
    compile options fourth (JAX 0.7 to 0.12), wrapped once."""
    _hook_compile_options()
    previous = getattr(_compile_edit, "edit", None)
    _compile_edit.edit = edit
    try:
        yield
    finally:
        _compile_edit.edit = previous


#: this thread's edit of its compiles' options (:func:`compile_options_edited`)
_compile_edit = threading.local()
_hook_lock = threading.Lock()


def _hook_compile_options() -> None:
    with _hook_lock:
        original = _compiler.compile_or_get_cached
        if getattr(original, "_memscope_device_memory", False):
            return

        @functools.wraps(original)
        def compile_or_get_cached(backend: Any, computation: Any, devices: Any,
                                  compile_options: Any, *args: Any, **kwargs: Any) -> Any:
            edit = getattr(_compile_edit, "edit", None)
            if edit is not None:
                compile_options = edit(compile_options)
            return original(backend, computation, devices, compile_options, *args, **kwargs)

        compile_or_get_cached._memscope_device_memory = True  # type: ignore[attr-defined]
        _compiler.compile_or_get_cached = compile_or_get_cached


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
    return _mlir.module_to_bytecode(lowered.compiler_ir("stablehlo"))


def compile_settings() -> list[tuple[str, str]]:
    """The compile-time JAX settings (:data:`COMPILE_SETTINGS`) as the calling
    thread sees them, each as ``repr``."""
    return [(name, repr(getattr(getattr(_config, name, None), "value", None)))
            for name in COMPILE_SETTINGS]


def compile_placement(lowered: Any) -> tuple[Any, ...]:
    """Where ``lowered`` compiles for: the backend's platform and version, the
    number of devices, each device its shardings name (platform, kind, id),
    and how many devices the backend has."""
    args = _compile_args(lowered)
    client = _client(lowered)
    devices: list[Any] = []
    for sharding in (*args.get("in_shardings", ()), *args.get("out_shardings", ())):
        for device in getattr(sharding, "_device_assignment", None) or ():
            if device not in devices:
                devices.append(device)
    return (client.platform, getattr(client, "platform_version", ""), args.get("num_devices"),
            tuple((d.platform, d.device_kind, d.id) for d in devices), len(client.devices()))


def _compile_args(lowered: Any) -> dict[str, Any]:
    return getattr(getattr(lowered, "_lowering", None), "compile_args", None) or {}


def _client(lowered: Any) -> Any:
    """The PJRT client ``lowered`` compiles with (the default backend's where it names none)."""
    return _compile_args(lowered).get("backend") or jax.devices()[0].client


def assignment_in_memory_analysis(lowered: Any) -> bool:
    """Whether ``memory_analysis()`` of a compile of ``lowered`` carries its
    buffer assignment (:func:`buffer_assignment_bytes`): XLA:CPU's does, on
    every supported jaxlib; XLA:GPU's PJRT plugin passes the sizes but not the
    assignment, nor does its serialized executable (seen on an H100 with jaxlib
    0.10.2 and an H200 with 0.11.2), and XLA:TPU's has none. Where it does not,
    memscope compiles with XLA's dump and reads the assignment there
    (:mod:`memscope.compiled.dump`)."""
    return str(_client(lowered).platform) == "cpu"


def optimized_hlo_module_protos(compiled: Any) -> list[bytes]:
    """Serialized ``HloModuleProto`` of each module of the executable JAX runs."""
    return [m.as_serialized_hlo_module_proto()
            for m in compiled.runtime_executable().hlo_modules()]


def serialized_executable_payloads(compiled: Any) -> tuple[bytes, ...]:
    """The executable JAX runs, serialized, as candidates for PJRT's
    ``ExecutableAndOptionsProto``: the bytes of ``LoadedExecutable.serialize()``
    (what JAX's persistent compilation cache stores), and those bytes after
    their first length-prefixed message, the header IFRT's serialization puts
    before the executable from jaxlib 0.9 (0.7 and 0.8 have none). ``()`` where the executable does not serialize (a
    backend that cannot export it, or host callbacks).

    Read only where ``memory_analysis()`` carries no buffer assignment: XLA:GPU's
    PJRT plugin (the C API) passes the sizes but not the assignment.
    """
    try:
        executable = compiled.runtime_executable()
        if hasattr(executable, "serialize"):
            data = bytes(executable.serialize())
        else:  # jaxlib 0.7: through the client, with no header
            data = bytes(executable.client.serialize_executable(executable))
    except Exception:  # any backend's refusal means "not available"
        return ()
    length, start = 0, 0
    for shift in range(0, 64, 7):  # the header's length, a protobuf varint
        if start >= len(data):
            return (data,)
        byte = data[start]
        start += 1
        length |= (byte & 0x7F) << shift
        if byte < 0x80:
            break
    return (data, data[start + length:]) if start + length < len(data) else (data,)


def buffer_assignment_bytes(stats: Any) -> bytes | None:
    """The serialized ``BufferAssignmentProto`` that ``memory_analysis()`` carries.

    The jaxlib series memscope supports exposes it as
    ``serialized_buffer_assignment_proto``; a jaxlib without that attribute (or
    a backend that leaves it empty) gives ``None``: the breakdown is unknown.
    """
    data = getattr(stats, "serialized_buffer_assignment_proto", None)
    return bytes(data) if data else None


def peak_memory_bytes(stats: Any) -> int | None:
    """XLA's own peak, where this jaxlib reports one (every supported jaxlib
    does; jaxlib 0.6 and older do not, and a backend may leave it out)."""
    peak = getattr(stats, "peak_memory_in_bytes", None)
    return None if peak is None else int(peak)


def partition_spec_text(spec: Any) -> str:
    """A ``PartitionSpec`` as JAX 0.9 and later print it: ``P('data', None)``.

    JAX 0.7 and 0.8 print ``PartitionSpec('data', None)``; one spelling keeps
    reports (and ``memscope diff`` across versions) comparable.
    """
    text = str(spec)
    old = "PartitionSpec("
    return f"P({text[len(old):]}" if text.startswith(old) else text


# --------------------------------------------------------------- targets --
# ``memscope --target tpu:TOPOLOGY`` / ``gpu:MODEL`` compiles each captured
# program for an accelerator this machine lacks (libtpu's compiler, or the CUDA
# plugin's, through JAX's topology API); nothing of it runs. See
# memscope.compiled.targets.


def pjrt_plugin_loaded(platform: str) -> bool:
    """Whether this process has loaded the PJRT plugin of ``platform`` (``tpu``,
    ``cuda``): JAX did, finding it installed, or :func:`load_cuda_plugin` /
    :func:`load_tpu_plugin` did. Private: ``xla_client.pjrt_plugin_loaded``
    (jaxlib 0.7 to 0.12)."""
    try:
        return bool(_xla_client.pjrt_plugin_loaded(platform))
    except Exception:
        return False


def load_cuda_plugin(library: str) -> None:
    """Register JAX's CUDA PJRT plugin, the compiler in ``library`` (its
    ``xla_cuda_plugin.so``), as the platform ``cuda``, as the plugin's own
    ``jax_plugins.xla_cuda13.initialize`` does when JAX finds it installed, but
    by path, without its checks of the CUDA libraries a GPU needs, and for this
    process only: its topologies (compile-only devices) then come from it. A
    backend JAX has already started keeps its platforms. Private:
    ``xla_bridge.register_plugin``, ``xla_client.generate_pjrt_gpu_plugin_options``
    (JAX 0.7 to 0.12)."""
    _xla_bridge.register_plugin("cuda", priority=500, library_path=library,
                                options=_xla_client.generate_pjrt_gpu_plugin_options())


def load_tpu_plugin(library: str) -> None:
    """Load libtpu from ``library`` (its ``libtpu.so``) as the platform ``tpu``,
    where JAX's TPU topologies look for it (``make_pjrt_tpu_topology``: a plugin
    loaded already is used). Private: ``xla_client.load_pjrt_plugin_dynamically``
    (jaxlib 0.7 to 0.12)."""
    _xla_client.load_pjrt_plugin_dynamically("tpu", library)


def mesh_compile_args(lowered: Any) -> dict[str, Any]:
    """What JAX compiles ``lowered`` (a ``jax.stages.Lowered``) with: its backend,
    shardings and context mesh. Private: ``Lowered._lowering`` is JAX's
    ``MeshComputation``, whose ``compile`` reads them from ``compile_args``
    (``jax/_src/interpreters/pxla.py``, JAX 0.7 to 0.10).

    Raises:
        TypeError: the lowering is not a ``MeshComputation``.
    """
    lowering = lowered._lowering
    if not isinstance(lowering, _pxla.MeshComputation):
        raise TypeError(f"cannot retarget a {type(lowering).__name__} lowering")
    args: dict[str, Any] = lowering.compile_args
    return args


def device_assignment(lowered: Any) -> tuple[Any, ...] | None:
    """The devices ``lowered`` compiles for, in the order its shardings name them
    (``MeshComputation._device_list``, JAX 0.7 to 0.10); ``None`` where it names none."""
    assignment = lowered._lowering._device_list
    return None if assignment is None else tuple(assignment)


def with_compile_args(lowered: Any, args: dict[str, Any],
                      devices: tuple[Any, ...] | None) -> Any:
    """``lowered`` set to compile with other ``args`` (:func:`mesh_compile_args`)
    for other ``devices`` (:func:`device_assignment`), as a lowering of its own
    with no executable yet (``MeshComputation._executable``)."""
    there = copy.copy(lowered._lowering)
    there.compile_args = args
    there._device_list = None if devices is None else _pxla._create_device_list(devices)
    there._executable = None
    out = copy.copy(lowered)
    out._lowering = there
    return out


def is_unspecified_sharding(s: Any) -> bool:
    """JAX's placeholders for a sharding left to XLA (``UNSPECIFIED``, ``AUTO``)."""
    return s is None or type(s).__name__ in ("UnspecifiedValue", "AUTO")


# ------------------------------------------------------------------- refs --

#: ``jax.Ref`` (``jax.new_ref``) is ``core.Ref`` from JAX 0.7.2; 0.7.0 and 0.7.1
#: named it ``MutableArray`` / ``ArrayRef`` (untested: see docs/versions.md).
_REF_TYPE: Any = (getattr(_core, "Ref", None) or getattr(_core, "ArrayRef", None)
                  or getattr(_core, "MutableArray", None))

#: What a jitted function does with a Ref it is given or closes over, from the
#: read, write and accumulate effects JAX records on the traced jaxpr.
RefEffectKind = str  # "updated" | "read" | "written" | "unused"


def is_ref(x: Any) -> bool:
    """True for a ``jax.Ref`` (``jax.new_ref``) held at the top level, not a
    tracer of one."""
    return _REF_TYPE is not None and isinstance(x, _REF_TYPE) and not is_tracer(x)


def ref_array(x: Any) -> Any:
    """The ``jax.Array`` that holds a Ref's buffer now (``Ref._refs._buf``), for
    reading its state only; ``None`` for a Ref built of several arrays (a
    "high" Ref). JAX writes each call's new value into this same object
    (``_replace_with``), so it is never to be kept."""
    buf = getattr(getattr(x, "_refs", None), "_buf", None)
    return buf if isinstance(buf, jax.Array) else None


def ref_addresses(x: Any) -> tuple[int, ...] | None:
    """The device address of a Ref's buffer, one per addressable shard; ``None``
    where it cannot be read.

    JAX writes a call's new value into the Ref's array object itself
    (``ArrayImpl._replace_with``, 0.7 to 0.10), which swaps its per-device
    buffers but not the ``addressable_shards`` it cached, which then name the
    old, deleted ones. From 0.9 they are read through a twin of the array
    object (:func:`buffer_addresses`), which leaves nothing behind. Before, on one
    device the Ref's own ``unsafe_buffer_pointer()`` reads the current buffer
    (and, unlike ``addressable_data(0)``, leaves no per-device array object
    behind for ``jax.live_arrays()`` to count); on several, ``addressable_data(i)``.
    """
    buf = ref_array(x)
    if buf is None or buf.is_deleted() or no_buffer(buf, wait=True):
        return None
    try:
        if ARRAY_TWINS:  # the buffers the array object holds now, through a twin
            return buffer_addresses(buf)
        count = len(buf.sharding.addressable_devices)
        if count == 1:
            return (int(x.unsafe_buffer_pointer()),)
        return tuple(int(buf.addressable_data(i).unsafe_buffer_pointer())
                     for i in range(count))
    except Exception:  # a backend without raw addresses
        return None


def is_ref_aval(aval: Any) -> bool:
    """True for the abstract value of a Ref (``jax.typeof(ref)``: ``Ref{f32[4]}``)."""
    return isinstance(aval, _state_types.AbstractRef)


@dataclass(frozen=True)
class RefLayout:
    """How JAX lowered a call's Refs (``pxla._discharge_refs``): each Ref the
    program keeps becomes an extra result of ``main`` aliased to its argument,
    and each Ref it closes over an extra argument after the kept ones.

    ``writes_back`` has one entry per non-token result of ``main``: the
    non-token argument whose Ref it holds the new value of, else ``None``.
    ``closed_over`` counts the Refs appended to the arguments.
    """

    writes_back: tuple[int | None, ...]
    closed_over: int


def ref_layout(lowered: Any) -> RefLayout | None:
    """The lowering's ``MutationData`` (its compile arguments' ``mut``) as
    indices; ``None`` when the program has no Ref argument (0.7 to 0.10)."""
    mut = lowered._lowering.compile_args.get("mut")
    if mut is None:
        return None
    return RefLayout(writes_back=tuple(mut.out_mut), closed_over=len(mut.in_mut))


def closed_over_refs(lowered: Any) -> list[Any]:
    """The Refs a lowered program closes over, in the order JAX appended them to
    ``main``'s arguments. The caller reads them and lets go."""
    mut = lowered._lowering.compile_args.get("mut")
    return [] if mut is None else list(mut.in_mut)


def ref_accesses(closed_jaxpr: Any) -> tuple[tuple[RefEffectKind | None, ...],
                                             list[tuple[Any, RefEffectKind]]]:
    """What the traced program does with each Ref: per argument (``None`` for
    one that is not a Ref), and ``(ref, access)`` for each Ref it closes over.

    JAX records a read, write or accumulate effect per Ref on the traced jaxpr
    (also for uses inside ``scan``, ``cond`` and inner jits). JAX 0.7 to 0.9 name
    the Ref by its position in ``constvars + invars`` (``input_index``); JAX 0.10
    by its variable (``input``).
    """
    jaxpr = closed_jaxpr.jaxpr
    variables = [*jaxpr.constvars, *jaxpr.invars]
    seen: dict[int, set[str]] = {}
    for effect in closed_jaxpr.effects:
        if not isinstance(effect, _state_types.RefEffect):
            continue
        where = getattr(effect, "input", getattr(effect, "input_index", None))
        if not isinstance(where, int):
            where = next((i for i, v in enumerate(variables) if v is where), None)
        if where is None:
            continue
        kind = ("read" if isinstance(effect, _state_types.ReadEffect) else
                "written" if isinstance(effect, _state_types.WriteEffect) else "updated")
        seen.setdefault(where, set()).add(kind)

    def access(i: int) -> RefEffectKind:
        kinds = seen.get(i, set())
        if "updated" in kinds or kinds == {"read", "written"}:
            return "updated"
        return next(iter(kinds)) if kinds else "unused"

    n = len(jaxpr.constvars)
    args = tuple(access(n + i) if is_ref_aval(v.aval) else None
                 for i, v in enumerate(jaxpr.invars))
    consts = [(c, access(i)) for i, c in enumerate(closed_jaxpr.consts) if is_ref(c)]
    return args, consts


# ------------------------------------------------------------------ hijax --
#
# A hijax value (``jax.experimental.hijax``: Flax's hijax ``Variable``) is one
# leaf to JAX's pytrees and to its tracing, and several arrays to its lowering:
# a traced jaxpr over one is ``is_high``, and lowering it first turns it into a
# jaxpr over the arrays of each hijax type (``lo_ty``; ``pe.lower_jaxpr``).
# JAX 0.7 to 0.10 also have mutable hijax types (with quasi-dynamic data,
# ``has_qdd``): each one the program takes, or closes over, adds results to
# ``main``, its arrays' new values, which JAX writes back into it after the
# call (``pjit._to_lojax``). JAX 0.11 has no mutable hijax type.


def _hijax_type(x: Any) -> Any:
    """JAX's type of ``x`` where it is a hijax type held at the top level, else
    ``None``. A hijax type is registered by its exact class
    (``hijax.register_hitype``), so no other value's type is asked for (asking
    may run its ``__jax_array__``)."""
    mappings = getattr(_core, "pytype_aval_mappings", None)
    if isinstance(x, jax.Array) or mappings is None:
        return None
    typeof = mappings.get(type(x))
    if typeof is None:
        return None
    try:
        aval = typeof(x)
    except Exception:  # not a value JAX can trace: JAX says so at the call
        return None
    return aval if getattr(aval, "is_high", False) is True else None


def is_hijax(x: Any) -> bool:
    """True for a value of a hijax type (a Flax hijax ``Variable``), not a tracer of one."""
    return _hijax_type(x) is not None


def writes_back(x: Any) -> bool:
    """True for a value of a mutable hijax type (JAX 0.7 to 0.10): the program
    returns its arrays' new values, which JAX writes back into it."""
    aval = _hijax_type(x)
    return aval is not None and getattr(aval, "has_qdd", False) is True


def lo_values(x: Any) -> list[Any] | None:
    """The arrays a hijax value is to its compiled program, as JAX reads them at
    the call (``pjit._to_lojax``), in the order of ``main``'s arguments; ``None``
    for any other value. For a mutable one, its state now."""
    aval = _hijax_type(x)
    if aval is None:
        return None
    if getattr(aval, "has_qdd", False) is True:
        with_state = _core.cur_aval_qdd(x)
        read = getattr(with_state, "read_loval_in", None) or with_state.read_loval  # (0.10, 0.7-0.9)
        return list(read(x))
    return list(aval.lower_val(x))


@dataclass(frozen=True)
class HighValue:
    """One value of a traced program over hijax types, as its lowering has it:
    the abstract value of each of its arrays (an array's: itself), and, for a
    hijax value, its type's own description (its aval, or its quasi-dynamic
    data), which names the arrays (:func:`memscope._frameworks.hijax_paths`)."""

    lo: tuple[Any, ...]
    high: bool = False
    described: Any = None
    #: the hijax type as JAX prints it, without its parentheses (``Param``)
    name: str = ""


def hijax_value(x: Any) -> HighValue | None:
    """A hijax value's :class:`HighValue` now (a mutable one's, in its state
    now); ``None`` for any other value."""
    aval = _hijax_type(x)
    if aval is None:
        return None
    if getattr(aval, "has_qdd", False) is True:
        return _high_value(_core.cur_aval_qdd(x))
    return _high_value(aval)


@dataclass(frozen=True)
class HighLayout:
    """How JAX lowers a traced program over hijax values.

    ``consts`` are the values JAX hoisted out of the function (what it closes
    over), first among ``main``'s arguments; ``inputs`` and ``outputs`` the
    call's flat leaves. ``written_back`` holds, for each mutable hijax value the
    program takes, its index among ``[*consts, *inputs]`` and its new value: in
    this order they are the first of ``main``'s results.
    """

    consts: tuple[HighValue, ...]
    inputs: tuple[HighValue, ...]
    outputs: tuple[HighValue, ...]
    written_back: tuple[tuple[int, HighValue], ...]


def _high_value(aval: Any) -> HighValue:
    if not getattr(aval, "is_high", False):
        return HighValue((aval,))
    with_state = getattr(_core, "AvalQDD", None)  # JAX 0.7 to 0.10: a type and its state
    qdd = aval.qdd if with_state is not None and isinstance(aval, with_state) else None
    kind = aval.aval if qdd is not None else aval
    try:
        name = str(kind.str_short())
    except Exception:  # a type that does not print itself
        name = type(kind).__name__
    return HighValue(tuple(aval.lo_ty()), high=True,
                     described=qdd if qdd is not None else kind,
                     name=name[:-2] if name.endswith("()") else name)


def high_layout(traced: Any) -> HighLayout | None:
    """How ``traced`` (a ``jax.stages.Traced``) lowers its hijax values;
    ``None`` for a program over arrays only."""
    jaxpr = traced.jaxpr
    if not getattr(jaxpr, "is_high", False):
        return None
    # JAX 0.7 to 0.10 pair each type with its state at entry and at exit.
    entry = getattr(jaxpr, "in_aval_qdds", None) or jaxpr.in_avals
    final = getattr(jaxpr, "final_aval_qdds", None) or ()
    n = traced._num_consts
    values = [_high_value(a) for a in entry]
    written = tuple((i, _high_value(a)) for i, a in enumerate(final)
                    if getattr(a, "has_qdd", False) is True)
    return HighLayout(consts=tuple(values[:n]), inputs=tuple(values[n:]),
                      outputs=tuple(_high_value(a) for a in jaxpr.out_avals),
                      written_back=written)


def hoisted_consts(traced: Any) -> list[Any]:
    """The values JAX hoisted out of a traced function (``HighLayout.consts``):
    for the caller to read and let go."""
    return list(getattr(traced, "_consts", ()))


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
    convert = getattr(_pe, "convert_const_himutables", None)
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


def leaf_nbytes(shape: tuple[int, ...], dtype: Any) -> int:
    """Bytes of one array of ``shape`` and ``dtype``, counting extended dtypes
    (PRNG keys) by their physical representation."""
    physical = _core.physical_aval(_core.ShapedArray(shape, dtype))
    return int(np.prod(physical.shape, dtype=np.int64)) * np.dtype(physical.dtype).itemsize


@dataclass(frozen=True)
class JitSpec:
    """The options of one ``jax.jit`` object that decide what it compiles."""

    static_argnums: tuple[int, ...]
    static_argnames: tuple[str, ...]
    donate_argnums: tuple[int, ...]
    donate_argnames: tuple[str, ...]
    #: hashable stand-in for every option, to merge jit objects made alike
    token: Any

    @property
    def donates(self) -> bool:
        """The jit donates some argument (by position or by name)."""
        return bool(self.donate_argnums or self.donate_argnames)


def is_jit_object(obj: Any) -> bool:
    """True for what ``jax.jit`` returns (it carries the ``_jit_info`` JAX resolved)."""
    return callable(obj) and hasattr(obj, "_jit_info")


def jit_spec(jitted: Any) -> JitSpec:
    """Read the options JAX resolved when the jit object was made.

    JAX resolves static and donated names to positions (and back) from the
    function's signature once, at ``jax.jit`` time, and keeps the result in
    ``_jit_info``; reading it there gives exactly JAX's interpretation.
    """
    info = jitted._jit_info
    # PjitInfo compares by identity; its fields (less the function's own) say
    # what the jit does.
    options = tuple(getattr(info, name) for name in info._fields
                    if name not in ("fun_sourceinfo", "fun_signature"))
    try:
        hash(options)
        token: Any = options
    except TypeError:
        token = id(jitted)
    return JitSpec(
        static_argnums=tuple(info.static_argnums),
        static_argnames=tuple(info.static_argnames),
        donate_argnums=tuple(info.donate_argnums),
        donate_argnames=tuple(info.donate_argnames),
        token=token,
    )



def sharding_key(sharding: Any, ndim: int) -> Any:
    """A hashable key equal for shardings JAX treats as the same placement.

    ``NamedSharding(mesh, P())`` and ``NamedSharding(mesh, P(None))`` differ as
    objects but are one placement: JAX compiles one executable for both. This is
    what ``Sharding.is_equivalent_to`` compares (the HLO sharding, the device
    list and the memory kind), as one key.
    """
    try:
        return (sharding._to_xla_hlo_sharding(ndim), sharding._internal_device_list,
                sharding.memory_kind)
    except Exception:  # a sharding kind without these: its own equality
        return sharding


def add_duration_listener(listener: Callable[..., None]) -> None:
    """Hear JAX's monitoring duration events (compile times) until removed
    (:func:`remove_duration_listener`, whose name JAX 0.8 made private)."""
    jax.monitoring.register_event_duration_secs_listener(listener)


def remove_duration_listener(listener: Callable[..., None]) -> None:
    """Stop hearing them. JAX 0.8 named the remover privately
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

#: ``hook(fun, primals, has_aux)`` for the thread that set it (see :func:`vjp_hook`)
_VJP_HOOK = threading.local()

VjpHook = Callable[[Callable[..., Any], tuple[Any, ...], bool], "Callable[..., Any] | None"]


@contextlib.contextmanager
def vjp_hook(hook: VjpHook) -> Iterator[None]:
    """Hand every reverse-mode differentiation the calling thread traces in the
    block to ``hook(fun, primals, has_aux)`` first; a callable it returns is
    differentiated in ``fun``'s place.

    ``jax.grad``, ``jax.value_and_grad``, ``jax.vjp`` and the framework wrappers
    over them (``eqx.filter_value_and_grad``, ``nnx.grad``) all reach one
    private entry point (see :data:`_VJP_TAKES_CALLABLE`), looked up as a module
    attribute at call time, so differentiations set up anywhere (at import, in
    a library) are seen. Other threads (the user's program) go straight to
    JAX's own; the hook is off while it runs, so its own tracing is not hooked.
    """
    name = "vjp" if _VJP_TAKES_CALLABLE else "_vjp"
    original = getattr(_api, name)

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

    @functools.wraps(original)
    def hooked(fun: Any, *primals: Any, has_aux: bool = False, **kwargs: Any) -> Any:
        if _VJP_TAKES_CALLABLE:
            new = replacement_for(fun, primals, has_aux)
            return original(new or fun, *primals, has_aux=has_aux, **kwargs)
        new = replacement_for(fun.call_wrapped, primals, has_aux)
        if new is not None:
            fun = _linear_util.wrap_init(new, debug_info=fun.debug_info)
        return original(fun, *primals, has_aux=has_aux, **kwargs)

    public = jax.vjp is original
    setattr(_api, name, hooked)
    if public:
        jax.vjp = hooked
    _VJP_HOOK.hook = hook
    try:
        yield
    finally:
        _VJP_HOOK.hook = None
        setattr(_api, name, original)
        if public:
            jax.vjp = original


def saved_residual_listing(fun: Callable[..., Any], primals: tuple[Any, ...]
                           ) -> list[tuple[Any, str]]:
    """JAX's own listing of what differentiating ``fun`` at ``primals`` saves:
    ``(aval, text)`` per residual (:func:`memscope.variants.jaxpr_facts.saved_residuals`
    reads the words). Private: ``ad_checkpoint.saved_residuals``, public in JAX
    0.7 to 0.9; 0.10 makes only ``print_saved_residuals`` public."""
    listing: list[tuple[Any, str]] = _ad_checkpoint.saved_residuals(fun, *primals)
    return listing


def flops(compiled: Any) -> float | None:
    """The ``flops`` of XLA's ``cost_analysis()``; ``None`` where it gives none.

    jaxlib returns one dict (0.4.30 and later) or a list of one dict per
    module (older); a backend may raise ``NotImplementedError``.
    """
    try:
        cost = compiled.cost_analysis()
    except Exception:
        return None
    if isinstance(cost, list | tuple):
        cost = cost[0] if cost else None
    value = cost.get("flops") if isinstance(cost, dict) else None
    return None if value is None else float(value)


def lowers_with_foreign_rules(jaxpr: Any) -> bool:
    """True when lowering ``jaxpr`` runs code from outside JAX: a lowering rule
    registered with ``mlir.register_lowering`` by the program or a library
    (Equinox's primitives), directly or through ``mlir.lower_fun(impl)``. Such
    code may count or print, as Equinox's own tests do."""
    tables = [_mlir._lowerings, *_mlir._platform_specific_lowerings.values()]
    seen: set[Any] = set()
    for eqn in all_eqns(jaxpr):
        primitive = eqn.primitive
        if primitive in seen:
            continue
        seen.add(primitive)
        for table in tables:
            rule: Any = table.get(primitive)
            if rule is not None and _runs_foreign_code(getattr(rule, "rule", rule)):
                return True  # (a LoweringRuleEntry's .rule, where JAX wraps rules)
    return False


def _runs_foreign_code(fun: Any, depth: int = 3) -> bool:
    """Whether ``fun``, or a function it closes over or is a partial of (to
    ``depth``), is defined outside JAX."""
    while isinstance(fun, functools.partial):
        fun = fun.func
    module = getattr(fun, "__module__", None) or ""
    if module.split(".")[0] not in ("jax", "jaxlib"):
        return True
    if depth == 0:
        return False
    for cell in getattr(fun, "__closure__", None) or ():
        try:
            value = cell.cell_contents
        except ValueError:  # an empty cell
            continue
        if callable(value) and not isinstance(value, type) \
                and _runs_foreign_code(value, depth - 1):
            return True
    return False


def traced_donation(traced: Any) -> tuple[bool, ...]:
    """The flat donation a ``jax.stages.Traced`` was jitted with (hoisted
    constants first, never donated; see :func:`with_donation`)."""
    return tuple(traced._params["donated_invars"])


def all_eqns(jaxpr: Any) -> Iterator[Any]:
    """Every equation of ``jaxpr`` (open or closed) and of the jaxprs inside it."""
    jaxpr = getattr(jaxpr, "jaxpr", jaxpr)  # a ClosedJaxpr's open jaxpr
    for eqn in jaxpr.eqns:
        yield eqn
        for sub in _core.jaxprs_in_params(eqn.params):
            yield from all_eqns(sub)


def eval_jaxpr(closed: Any, *args: Any) -> list[Any]:
    """Evaluate ``closed`` (a closed jaxpr) at ``args``, binding each equation
    under its own source info. Private: ``core.eval_jaxpr`` (JAX 0.7 to 0.12)."""
    out: list[Any] = _core.eval_jaxpr(closed.jaxpr, closed.consts, *args)
    return out


# --- address reads that leave arrays behind ---------------------------------------------

#: Reading a buffer's address through the array itself (``unsafe_buffer_pointer()``,
#: ``addressable_shards`` or ``addressable_data`` on every series, ``_arrays`` on a
#: sharded array) makes it cache a Python array per device, which
#: ``jax.live_arrays()`` then lists beside it, for as long as the array lives: the
#: program would see more live arrays than under python. memscope reads through a
#: twin, a second array object over the same device buffers, and the per-device
#: arrays go with it. JAX 0.9 brought ``ArrayImpl._rewrap_with_aval_and_sharding``
#: for the twin; on 0.7 and 0.8 jaxlib's ``reorder_shards`` onto the array's own
#: sharding, reusing its buffers, makes one (checked by running: the addresses are
#: the array's, and no array is left once the twin goes).
ARRAY_TWINS: bool = _JAX_SERIES >= (0, 9)
#: Where no twin can be made (an array jaxlib will not reorder), the read goes
#: through the array and leaves its per-device arrays behind: they are noted
#: (weakly) so that memscope's own samples skip them.
_VIEWS: dict[int, weakref.ref[Any]] = {}


def _address_twin(x: Any) -> Any:
    """A second array object over ``x``'s device buffers (see :data:`ARRAY_TWINS`)."""
    if ARRAY_TWINS:
        return x._rewrap_with_aval_and_sharding(x.aval, x.sharding)
    return _xla_client.reorder_shards(  # 0.7, 0.8
        x, x.sharding, _xla_client.ArrayCopySemantics.REUSE_INPUT)


def buffer_addresses(x: Any) -> tuple[int, ...]:
    """The device address of each addressable shard's buffer of the ``jax.Array``
    ``x``, in ``addressable_shards`` order, as integers; ``x`` keeps no per-device
    array from the read (read through a twin, :data:`ARRAY_TWINS`).

    Raises what the backend raises where it gives no raw addresses.
    """
    try:
        twin = _address_twin(x)
    except Exception:  # no twin of this array: read through it, and note what it keeps
        twin = None
    if twin is not None and twin is not x:
        try:
            return tuple(int(a.unsafe_buffer_pointer()) for a in twin._arrays)
        finally:
            del twin
    try:
        return tuple(int(shard.data.unsafe_buffer_pointer()) for shard in x.addressable_shards)
    finally:
        note_address_views(x)


def note_address_views(x: Any) -> None:
    """Remember the per-device arrays an address read left on ``x`` (by weak
    reference), for :func:`is_address_view`."""
    try:
        views = list(x._arrays or ())
    except Exception:  # not an array with per-device arrays
        return
    for view in views:
        if view is not x:
            _VIEWS[id(view)] = weakref.ref(view)
    if len(_VIEWS) > 100_000:
        for key in [k for k, ref in _VIEWS.items() if ref() is None]:
            del _VIEWS[key]


def default_device() -> Any:
    """The device a call runs on when no argument commits it to one: the
    ``jax_default_device`` setting's where set, else the default backend's first
    local device (``pxla.get_default_device``, JAX 0.7 to 0.10)."""
    return _pxla.get_default_device()


def is_address_view(a: Any) -> bool:
    """True for a per-device array an address read of memscope's left behind."""
    if not _VIEWS:
        return False
    ref = _VIEWS.get(id(a))
    return ref is not None and ref() is a
