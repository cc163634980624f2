"""``jax.Ref`` arguments and closed-over Refs, held to what JAX does with them.

JAX lowers each Ref a jitted function keeps into an extra result of ``main``
aliased to the Ref's own argument (``tf.aliasing_output``), and writes the new
value into the Ref's buffer: its ``unsafe_buffer_pointer()`` never changes.
Each test runs a real program and checks memscope's figures and fates against
that ground truth: the address across calls, ``jax.typeof``, the lowered
module's aliases and a direct ``jax.jit(...).lower(...).compile()``.
"""

from __future__ import annotations

import gc
import json
import re
import subprocess
import sys
import weakref
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import pytest

from memscope import _compat
from memscope.analysis import observed
from memscope.analysis.observed import Observation
from memscope.assemble.function import function_report
from memscope.capturing import capture
from memscope.report import FunctionReport, InputBuffer, load_report, peak_rule, save_report
from tests.support.versions import jax_since

pytestmark = pytest.mark.skipif(
    not hasattr(jax, "new_ref") or jax.__version__.startswith(("0.7.0", "0.7.1")),
    reason=f"jax.new_ref and jax.Ref came with JAX 0.7.2; this is {jax.__version__}")

#: jax.vjp(...).with_refs came with JAX 0.8; jax.empty_ref and jax.free_ref with 0.9.
WITH_REFS = jax_since((0, 8), "jax.vjp(...).with_refs")
EMPTY_REF = jax_since((0, 9), "jax.empty_ref and jax.free_ref")
NOT_USABLE = "ignore:Some donated buffers were not usable"


def pointer(ref: Any) -> int:
    return int(ref.unsafe_buffer_pointer())


def pointers(ref: Any) -> tuple[int, ...]:
    """Each device's buffer of a (sharded) Ref: JAX's ``unsafe_buffer_pointer()``
    is for one device only, so each device's array (``addressable_data``)."""
    buf = ref._refs._buf  # the array JAX writes the Ref's new value into
    return tuple(buf.addressable_data(i).unsafe_buffer_pointer()
                 for i in range(len(buf.sharding.addressable_devices)))


def captured(make: Callable[[], Any], *args: Any, calls: int = 3, refs: tuple[Any, ...] = (),
             **options: Any) -> tuple[list[FunctionReport], list[list[int]], list[Any]]:
    """Jit with ``make()`` inside a capture and call it ``calls`` times; the
    reports, each Ref in ``refs``' address before the first call and after
    each, and the outputs."""
    addresses = [[pointer(r)] for r in refs]
    outs = []
    with capture(**options) as session:
        f = make()
        for _ in range(calls):
            outs.append(f(*args))
            jax.block_until_ready(outs[-1])
            for seen, r in zip(addresses, refs, strict=True):
                seen.append(pointer(r))
    return [function_report(e) for e in session.entries], addresses, outs


def direct_peak(fun: Callable[..., Any], *args: Any, **options: Any) -> int | None:
    """memscope's peak rule applied to JAX's own compile of the same call."""
    stats: Any = jax.jit(fun, **options).lower(*args).compile().memory_analysis()
    peak, _, _ = peak_rule(stats.argument_size_in_bytes, stats.output_size_in_bytes,
                           stats.alias_size_in_bytes, stats.temp_size_in_bytes,
                           _compat.executables.peak_memory_bytes(stats))
    return peak


def main_aliases(fun: Callable[..., Any], *args: Any, **options: Any) -> dict[int, int]:
    """``{argument: result}`` of ``tf.aliasing_output`` in the lowered ``main``."""
    text = jax.jit(fun, **options).lower(*args).as_text()
    header = next(line for line in text.splitlines() if "func.func public @main" in line)
    params = header.split(") -> (")[0]
    found = {}
    for arg in re.finditer(r"%arg(\d+): [^%]*", params):
        alias = re.search(r"tf\.aliasing_output = (\d+)", arg.group(0))
        if alias:
            found[int(arg.group(1))] = int(alias.group(1))
    return found


def by_path(buffers: Any) -> dict[str, InputBuffer]:
    return {b.path: b for b in buffers}


# --- the program -------------------------------------------------------------


def _step(params_ref: Any, x: Any) -> Any:
    p = params_ref[...]
    params_ref[...] = p - 0.1 * jnp.tanh(p @ x)
    return jnp.sum(p)


def test_a_ref_step_is_updated_in_place_at_one_address_and_read_like_any_program():
    params = jax.new_ref(jnp.ones((128, 128)))
    x = jnp.ones((128, 128)) * 0.01
    ty = jax.typeof(params)
    assert isinstance(ty, jax.ref.AbstractRef)
    expected_peak = direct_peak(_step, params, x)
    aliases = main_aliases(_step, params, x)

    (fn,), addresses, outs = captured(lambda: jax.jit(_step), params, x, refs=(params,))

    # JAX: the Ref keeps its buffer through three calls; its main argument is
    # aliased to a result that is not one of the call's outputs.
    assert len(set(addresses[0])) == 1
    assert aliases == {0: 1}
    assert fn.error is None and fn.memory is not None
    assert fn.memory.peak_bytes == expected_peak
    ref, arg = fn.inputs
    assert (ref.path, ref.fate, ref.ref, ref.observed, ref.parameter) == (
        "params_ref", "aliased", "updated", "confirmed", 0)
    assert (ref.shape, ref.dtype) == (ty.inner_aval.shape, str(ty.inner_aval.dtype))
    assert fn.signature == "(Ref{float32[128,128]}, float32[128,128])"
    assert ref.donated is False and ref.candidate is False and ref.output is None
    assert ref.ref_kept is True  # read again when the capture ended, after the third call
    assert (arg.path, arg.ref, arg.fate) == ("x", None, "not_donated")
    assert [o.path for o in fn.outputs] == ["result"]
    assert len(fn.outputs) == len(jax.tree_util.tree_leaves(outs[0]))
    assert fn.findings == ()


def test_what_the_program_does_with_each_ref_read_written_unused():
    r, w, u = (jax.new_ref(jnp.arange(4.0)) for _ in range(3))
    x = jnp.full((4,), 2.0)

    def f(r, w, u, x):
        w[...] = r[...] * x
        return x.sum()

    aliases = main_aliases(f, r, w, u, x)
    expected_peak = direct_peak(f, r, w, u, x)
    (fn,), addresses, _ = captured(lambda: jax.jit(f), r, w, u, x, refs=(r, w, u))
    inputs = by_path(fn.inputs)

    assert (inputs["r"].ref, inputs["w"].ref, inputs["u"].ref) == ("read", "written", "unused")
    # JAX: r unchanged, w holds what was written, u never reached the program
    # (pruned: main has r, w and x only, r and w aliased).
    assert (r[...] == jnp.arange(4.0)).all() and (w[...] == jnp.arange(4.0) * 2).all()
    assert aliases == {0: 1, 1: 2}
    assert [inputs[p].parameter for p in ("r", "w", "u", "x")] == [0, 1, None, 2]
    assert inputs["u"].fate == "pruned" and inputs["u"].observed == "n/a"
    # Under keep_unused=True JAX keeps it: aliased to itself, unchanged, in place.
    (kept,), _, _ = captured(lambda: jax.jit(f, keep_unused=True), r, w, u, x, calls=1)
    assert [(b.ref, b.fate, b.observed) for b in kept.inputs[:3]] == [
        ("read", "aliased", "confirmed"), ("written", "aliased", "confirmed"),
        ("unused", "aliased", "confirmed")]
    assert main_aliases(f, r, w, u, x, keep_unused=True) == {0: 1, 1: 2, 2: 3}
    for path in ("r", "w"):
        assert inputs[path].fate == "aliased" and inputs[path].observed == "confirmed"
    assert all(len(set(a)) == 1 for a in addresses)
    assert fn.memory is not None and fn.memory.peak_bytes == expected_peak


# --- closed over, in pytrees, in frameworks -----------------------------------------


STATE: Any = None


def _closing(x: Any) -> Any:
    STATE[...] += x
    return x * 2


def test_a_closed_over_ref_is_named_and_confirmed_in_place():
    global STATE
    STATE = jax.new_ref(jnp.zeros((64, 64)))
    x = jnp.ones((64, 64))
    aliases = main_aliases(_closing, x)
    expected_peak = direct_peak(_closing, x)

    (fn,), addresses, _ = captured(lambda: jax.jit(_closing), x, refs=(STATE,))

    assert len(set(addresses[0])) == 1 and float(STATE[0, 0]) == 3.0 + 0.0
    # JAX appends the Ref after the call's arguments, aliased to a result of its own.
    assert aliases == {1: 1}
    (ref,) = fn.closed_over_refs
    assert (ref.path, ref.fate, ref.ref, ref.observed, ref.parameter, ref.ref_kept) == (
        "STATE", "aliased", "updated", "confirmed", 1, True)
    assert [b.path for b in fn.inputs] == ["x"] and [o.path for o in fn.outputs] == ["result"]
    assert fn.memory is not None and fn.memory.peak_bytes == expected_peak


def test_closed_over_refs_are_named_through_closures_attributes_and_keys():
    class Holder:
        def __init__(self) -> None:
            self.cache = {"a": jax.new_ref(jnp.zeros((4,)))}

    holder = Holder()
    counter = jax.new_ref(jnp.zeros((), jnp.int32))

    def make() -> Any:
        def f(x: Any) -> Any:
            holder.cache["a"][...] = x
            counter[...] += 1
            return x.sum()
        return jax.jit(f)

    (fn,), addresses, _ = captured(make, jnp.ones((4,)),
                                   refs=(holder.cache["a"], counter))
    named = {b.path: (b.ref, b.observed, b.ref_kept) for b in fn.closed_over_refs}
    frame = fn.to_dataframe()
    assert list(frame["kind"]) == ["input", "closed_over_ref", "closed_over_ref", "output"]
    assert sorted(frame["ref"][1:3]) == ["updated", "written"]
    assert named == {"holder.cache['a']": ("written", "confirmed", True),
                     "counter": ("updated", "confirmed", True)}
    assert all(len(set(a)) == 1 for a in addresses) and int(counter[...]) == 3


def test_refs_inside_a_pytree_are_named_by_path_beside_arrays():
    state = {"w": jax.new_ref(jnp.ones((8, 8))), "m": jnp.ones((8,))}
    x = jnp.ones((8, 8))

    def f(state, x):
        state["w"][...] = state["w"][...] + x
        return state["m"] * 2

    (fn,), addresses, _ = captured(lambda: jax.jit(f), state, x, refs=(state["w"],))
    inputs = by_path(fn.inputs)
    assert inputs["state['w']"].ref == "updated" and inputs["state['w']"].observed == "confirmed"
    assert inputs["state['m']"].ref is None
    assert len(set(addresses[0])) == 1
    assert fn.memory is not None and fn.memory.peak_bytes == direct_peak(f, state, x)


def test_flax_nnx_variables_backed_by_refs():
    nnx = pytest.importorskip("flax.nnx")
    # Flax 0.12.0 (with JAX 0.7) spells it nnx.use_refs(True); later 0.12 releases
    # nnx.var_defaults(ref=True).
    refs_on = (nnx.var_defaults(ref=True) if hasattr(nnx, "var_defaults")
               else nnx.use_refs(True))
    with refs_on:
        model = nnx.Linear(16, 16, rngs=nnx.Rngs(0))
    kernel = (model.kernel.get_raw_value() if hasattr(model.kernel, "get_raw_value")
              else model.kernel.raw_value)
    assert _compat.values.is_ref(kernel)

    def make() -> Any:
        @nnx.jit
        def step(model: Any, x: Any) -> Any:
            y = model(x)
            model.kernel[...] = model.kernel[...] * 0.5
            return y.sum()
        return step

    (fn,), addresses, _ = captured(make, model, jnp.ones((4, 16)), refs=(kernel,))
    inputs = by_path(fn.inputs)
    assert len(set(addresses[0])) == 1
    assert (inputs["model.kernel"].ref, inputs["model.kernel"].observed) == (
        "updated", "confirmed")
    assert inputs["model.bias"].ref == "read"
    assert fn.error is None and fn.memory is not None


def test_a_ref_passed_to_an_equinox_filter_jit_is_closed_over_and_confirmed():
    eqx = pytest.importorskip("equinox")
    ref = jax.new_ref(jnp.zeros((4,)))

    def make() -> Any:
        @eqx.filter_jit
        def f(x: Any, r: Any) -> Any:
            r[...] += x
            return x * 2
        return f

    (fn,), addresses, _ = captured(make, jnp.ones((4,)), ref, refs=(ref,))
    # Equinox passes a non-array as static: JAX closes over the Ref.
    assert len(set(addresses[0])) == 1 and float(ref[0]) == 3.0
    assert [b.path for b in fn.inputs] == ["x"]
    (closed,) = fn.closed_over_refs
    assert (closed.ref, closed.fate, closed.observed) == ("updated", "aliased", "confirmed")


@WITH_REFS
def test_gradients_accumulated_with_with_refs():
    def loss(w: Any, x: Any) -> Any:
        return jnp.sum(jnp.tanh(x @ w))

    def accumulate(grad_ref: Any, w: Any, xs: Any) -> None:
        for i in range(xs.shape[0]):
            f_vjp: Any
            _, f_vjp = jax.vjp(lambda w, x=xs[i]: loss(w, x), w)
            f_vjp.with_refs(grad_ref)(jnp.float32(1.0))

    grads = jax.new_ref(jnp.zeros((8, 8)))
    w, xs = jnp.full((8, 8), 0.01), jnp.ones((3, 4, 8))
    expected_peak = direct_peak(accumulate, grads, w, xs)
    (fn,), addresses, _ = captured(lambda: jax.jit(accumulate), grads, w, xs, refs=(grads,))

    once = jax.grad(lambda w: sum(loss(w, xs[i]) for i in range(3)))(w)
    assert jnp.allclose(grads[...], 3 * once, rtol=1e-5)
    assert len(set(addresses[0])) == 1
    ref = by_path(fn.inputs)["grad_ref"]
    assert (ref.fate, ref.ref, ref.observed) == ("aliased", "updated", "confirmed")
    assert fn.outputs == ()
    assert fn.memory is not None and fn.memory.peak_bytes == expected_peak


@EMPTY_REF
def test_empty_ref_and_free_ref_inside_the_program():
    def f(x: Any) -> Any:
        scratch = jax.empty_ref(jax.typeof(x))
        scratch[...] = x * 2
        y = scratch[...] + 1
        jax.free_ref(scratch)
        return y

    x = jnp.ones((16,))
    (fn,), _, outs = captured(lambda: jax.jit(f), x, calls=1)
    assert (outs[0] == 3).all()
    assert fn.error is None and [b.ref for b in fn.inputs] == [None]
    assert fn.closed_over_refs == ()
    assert fn.memory is not None and fn.memory.peak_bytes == direct_peak(f, x)


@pytest.mark.skipif(jax.device_count() < 4, reason="needs 4 devices (tests/conftest.py)")
def test_a_sharded_ref_keeps_every_shard_in_place_and_figures_are_per_device():
    import numpy as np
    from jax.sharding import Mesh, NamedSharding, PartitionSpec

    mesh = Mesh(np.array(jax.devices()[:4]), ("d",))
    sharding = NamedSharding(mesh, PartitionSpec("d"))
    ref = jax.new_ref(jax.device_put(jnp.ones((8, 4)), sharding))
    x = jax.device_put(jnp.ones((8, 4)), sharding)

    def f(r, x):
        r[...] += x
        return x.sum()

    expected_peak = direct_peak(f, ref, x)
    seen = [pointers(ref)]
    with capture() as session:
        g = jax.jit(f)
        for _ in range(3):
            jax.block_until_ready(g(ref, x))
            seen.append(pointers(ref))
    (fn,) = [function_report(e) for e in session.entries]
    assert len(set(seen)) == 1 and len(seen[0]) == 4
    r = by_path(fn.inputs)["r"]
    assert (r.ref, r.observed, r.device_bytes, r.shard_shape) == ("updated", "confirmed", 32,
                                                                  (2, 4))
    assert fn.devices == 4
    assert fn.memory is not None and fn.memory.peak_bytes == expected_peak


def test_ahead_of_time_calls_and_recompiles_with_refs():
    def f(r, x):
        r[...] += x.sum()
        return x * 2

    refs, outs = [], []
    with capture() as session:
        g = jax.jit(f)
        for n in (4, 8):
            refs.append(jax.new_ref(jnp.zeros((n,))))
            outs.append(g(refs[-1], jnp.ones((n,))))
        refs.append(jax.new_ref(jnp.zeros((3,))))
        before = pointer(refs[-1])
        compiled = g.lower(refs[-1], jnp.ones((3,))).compile()
        outs.append(compiled(refs[-1], jnp.ones((3,))))
    reports = [function_report(e) for e in session.entries]
    assert [fn.signature for fn in reports[:2]] == ["(Ref{float32[4]}, float32[4])",
                                                   "(Ref{float32[8]}, float32[8])"]
    assert pointer(refs[-1]) == before and float(refs[-1][0]) == 3.0
    for fn, ref in zip(reports, refs, strict=True):
        r = by_path(fn.inputs)["r"]
        assert (r.ref, r.observed) == ("updated", "confirmed"), fn.signature
        assert fn.memory is not None and fn.memory.peak_bytes == direct_peak(
            f, ref, jnp.ones(ref.shape))


# --- donation -------------------------------------------------------------------------


def test_the_advice_never_donates_a_ref_nor_the_argument_holding_one():
    state = {"w": jax.new_ref(jnp.ones((64, 64))), "m": jnp.ones((1024,))}
    opt = jnp.ones((2048,))

    def step(state, opt, x):
        state["w"][...] = state["w"][...] + x
        return {"m": state["m"] * 2}, opt * 0.5

    (fn,), _, _ = captured(lambda: jax.jit(step), state, opt, jnp.ones((64, 64)),
                           calls=1, advise="full")
    inputs = by_path(fn.inputs)
    assert fn.advice is not None and fn.advice.add == ("opt",)
    assert [b.path for b in fn.inputs if b.candidate] == ["opt"]
    # state['m'] could be taken by result[0]['m'], but donating `state` would
    # donate the Ref too: explained, not advised.
    assert "also holds the Ref state['w']" in (inputs["state['m']"].reason or "")
    every = fn.variant("all")
    assert every is not None and "state" not in every.setting
    # What the advice measured is JAX's own compile of that donation.
    assert fn.advice.peak_after == direct_peak(step, state, opt, jnp.ones((64, 64)),
                                               donate_argnums=(1,))


def test_no_variant_donates_what_jax_would_pair_with_a_refs_new_value():
    ref = jax.new_ref(jnp.ones((4, 4)))
    pair = (jnp.ones((4, 4)), jnp.ones((4, 4)))

    def f(r, pair):
        r[...] += pair[1]
        return pair[0] * 2

    # JAX's ground truth: donating `pair` pairs pair[1] with the Ref's new value
    # (already aliased to the Ref), and XLA refuses the program.
    with pytest.raises(Exception, match="already aliased"):
        jax.jit(f, donate_argnums=1).lower(ref, pair).compile()
    (fn,), addresses, _ = captured(lambda: jax.jit(f), ref, pair, calls=1, advise="full",
                                   refs=(ref,))
    assert by_path(fn.inputs)["pair[0]"].candidate  # result could take it ...
    assert fn.advice is None  # ... but donating `pair` is what XLA refuses
    every = fn.variant("all")
    assert every is not None and every.memory is None and every.error is not None
    assert "JAX would pair pair[1] with the Ref r" in every.error
    assert len(set(addresses[0])) == 1


@pytest.mark.filterwarnings(NOT_USABLE)
def test_a_donated_ref_is_said_to_need_no_donation():
    d = {"a": jax.new_ref(jnp.ones((4, 4))), "b": jnp.ones((3,))}

    def f(d, x):
        d["a"][...] += x
        return d["b"] * 2

    (fn,), addresses, _ = captured(lambda: jax.jit(f, donate_argnums=0), d, jnp.ones((4, 4)),
                                   calls=1, refs=(d["a"],))
    ref = by_path(fn.inputs)["d['a']"]
    assert ref.donated and ref.ref == "updated" and ref.observed == "confirmed"
    assert "donating it saves nothing" in (ref.reason or "")
    assert len(set(addresses[0])) == 1
    assert by_path(fn.inputs)["d['b']"].fate == "aliased"


# --- never perturbing, never keeping ---------------------------------------------------


def test_memscope_keeps_no_ref_alive_and_changes_no_result():
    def run() -> tuple[Any, weakref.ref[Any]]:
        ref = jax.new_ref(jnp.ones((32, 32)))
        x = jnp.ones((32, 32)) * 0.01
        f = jax.jit(_step)
        outs = [jax.device_get(f(ref, x)) for _ in range(3)]
        return (outs, jax.device_get(ref[...])), weakref.ref(ref)

    plain, _ = run()
    # keep_calls: what `memscope fit` and an OOM post-mortem keep of a call
    with capture(keep_calls=True, advise="full") as session:
        measured, gone = run()
    gc.collect()
    (entry,) = session.entries
    assert gone() is None  # while memscope's session and its entries still exist
    assert entry.call is not None
    assert function_report(entry).inputs[0].observed == "confirmed"
    assert all((a == b).all() for a, b in zip(plain[0], measured[0], strict=True))
    assert (plain[1] == measured[1]).all()


def test_a_ref_whose_buffer_moved_is_a_finding():
    # Plain data: the check itself, on an address that changed.
    ref = InputBuffer(path="p", shape=(4,), dtype="float32", bytes=16, donated=False,
                      fate="aliased", parameter=0, ref="updated")
    seen = Observation(inputs_before=((100,),), inputs_deleted=(None,), outputs_after=(),
                       refs_after=((200,),))
    (checked,), findings = observed.check_buffers([ref], [], seen)
    assert checked.observed == "not_reused"
    assert findings == ("p (a Ref, updated): JAX writes its new value into its own buffer, "
                        "but the buffer moved during the call",)
    same = Observation(inputs_before=((100,),), inputs_deleted=(None,), outputs_after=(),
                       refs_after=((100,),))
    assert observed.check_buffers([ref], [], same) == ((InputBuffer(**{
        **ref.__dict__, "observed": "confirmed"}),), ())
    later = Observation(inputs_before=((100,),), inputs_deleted=(None,), outputs_after=(),
                        refs_after=((100,),), refs_end=((300,),))
    (checked,), findings = observed.check_buffers([ref], [], later)
    assert (checked.observed, checked.ref_kept) == ("confirmed", False)
    assert findings == ("p (a Ref): its buffer was in place through the first call but had "
                        "moved when the run ended (replaced outside this function?)",)


# --- the report's forms -----------------------------------------------------------------


PROGRAM = '''
import jax, jax.numpy as jnp
state = jax.new_ref(jnp.zeros((64, 64)))

@jax.jit
def step(params_ref, x):
    p = params_ref[...]
    params_ref[...] = p - 0.1 * jnp.tanh(p @ x)
    state[...] += x
    return jnp.sum(p)

params = jax.new_ref(jnp.ones((64, 64)))
for _ in range(3):
    print(float(step(params, jnp.ones((64, 64)) * 0.01)))
'''


def test_the_cli_reports_refs_in_terminal_json_and_html(tmp_path: Path):
    script = tmp_path / "refs_step.py"
    script.write_text(PROGRAM)
    plain = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                           check=True, cwd=tmp_path)
    # --detail: a function with nothing to change gets its section on request.
    done = subprocess.run([sys.executable, "-m", "memscope", "run", "--detail", "-o", "r.json",
                           "--html", "r.html", str(script)], capture_output=True, text=True,
                          cwd=tmp_path, env=_env())
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(plain.stdout)  # the program's own output, unchanged
    assert re.search(r"params_ref .* ref_updated +same_buffer, kept", done.stdout)
    assert re.search(r"state .* ref_updated +closed over +same_buffer, kept", done.stdout)
    data = json.loads((tmp_path / "r.json").read_text())
    (fn,) = data["functions"]
    assert fn["inputs"][0]["ref"] == "updated" and fn["inputs"][1]["ref"] is None
    assert [(b["path"], b["ref"], b["observed"], b["ref_kept"])
            for b in fn["closed_over_refs"]] == [("state", "updated", "confirmed", True)]
    html = (tmp_path / "r.html").read_text()
    assert 'data-fate="ref_updated"' in html and "closed-over Ref" in html
    shown = subprocess.run([sys.executable, "-m", "memscope", "show", "--fate", "ref_updated",
                            "r.json"], capture_output=True, text=True, cwd=tmp_path, env=_env())
    assert shown.returncode == 0, shown.stderr
    assert "2 of 3 inputs" in shown.stdout and "closed over" in shown.stdout
    report = load_report(str(tmp_path / "r.json"))
    save_report(report, str(tmp_path / "again.json"))
    assert load_report(str(tmp_path / "again.json")).functions[0].closed_over_refs == \
        report.functions[0].closed_over_refs


def _env() -> dict[str, str]:
    import os

    root = str(Path(__file__).resolve().parent.parent)
    path = os.environ.get("PYTHONPATH")
    return {**os.environ, "PYTHONPATH": root if not path else f"{root}{os.pathsep}{path}"}
