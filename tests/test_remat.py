"""Residuals and checkpoint policies (memscope.variants.remat) against JAX's own ground truth.

Residuals are compared with what ``jax.ad_checkpoint.print_saved_residuals``
prints for the same differentiation; each policy's figures with a direct
compile of the function written with ``jax.checkpoint(policy=...)``; and the
printed advice, evaluated as written and applied to the sample program, gives
the peak memscope predicted.
"""

from __future__ import annotations

import contextlib
import io
import re
import sys
import threading
from typing import Any

import jax
import jax.ad_checkpoint
import jax.numpy as jnp
import pytest

from memscope import _compat
from memscope.capturing import capture
from memscope.compiled.read import memory_figures
from memscope.report import Differentiation, Remat, RematVariant, Report
from memscope.variants import jaxpr_facts, remat
from memscope.views import remat_text
from tests.support.samples import sample_module

POLICY_ROWS = ("as_written", *remat.POLICIES)
#: what the activations sample measures: it names no value, so no names policy
MEASURED = (*POLICY_ROWS, "offload_dot_with_no_batch_dims")


def _sample(name: str) -> Any:
    return sample_module(name)


def _unnamed(origin: str) -> str:
    # JAX names an argument residual by the differentiated function's own
    # parameters: inside jax.value_and_grad that is JAX's partial, not the lambda.
    return re.sub(r"^from the argument .*", "from the argument", origin)


def jax_listing(fun: Any, *primals: Any) -> list[tuple[str, str]]:
    """(shape, origin) of each residual, as JAX's print_saved_residuals prints them."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        jax.ad_checkpoint.print_saved_residuals(fun, *primals)
    rows = []
    for line in out.getvalue().splitlines():
        aval, _, origin = line.partition(" ")
        rows.append((re.sub(r"^[a-z]+\d*", "", aval), _unnamed(origin)))
    return sorted(rows)


def our_listing(d: Differentiation) -> list[tuple[str, str]]:
    return sorted((f"[{','.join(map(str, r.shape))}]", _unnamed(r.origin))
                  for r in d.residuals)


# ------------------------------------------------------------- residuals --


def mlp_loss(params, x):
    h = x
    for w in params[:-1]:
        h = jnp.tanh(h @ w)
    return ((h @ params[-1]) ** 2).mean()


def test_mlp_residuals_equal_jax_listing():
    params = [jnp.ones((32, 32)) / 32 for _ in range(3)]
    x = jnp.ones((16, 32))

    def step(params, x):
        loss, grads = jax.value_and_grad(mlp_loss)(params, x)
        return [p - g for p, g in zip(params, grads, strict=True)], loss

    found, _ = remat.find(step, {}, ((params, x), {}))
    assert len(found) == 1
    d = remat.differentiation(found[0])
    # Inside the step, x is closed over by value_and_grad's argnums: JAX's
    # own listing of the same differentiation is over params with x fixed.
    assert our_listing(d) == jax_listing(lambda p: mlp_loss(p, x), params)
    assert d.api == "jax.value_and_grad" and d.function == "mlp_loss"
    assert d.total_bytes == sum(r.bytes for r in d.residuals) > 0
    assert [g.bytes for g in d.by_line] == sorted((g.bytes for g in d.by_line), reverse=True)
    assert sum(g.count for g in d.by_line) == len(d.residuals)
    tanh = [r for r in d.residuals if r.primitive == "tanh"]
    tanh_line = mlp_loss.__code__.co_firstlineno + 3  # h = jnp.tanh(h @ w)
    assert tanh and all(r.source == f"tests/test_remat.py:{tanh_line}" for r in tanh)


def test_transformer_residuals_equal_jax_listing():
    t = _sample("transformer_adam")
    params = t.init_params(jax.random.key(0), 8, 128, 64)
    opt_state = t.optimizer.init(params)
    batch = t.make_batch(jax.random.key(1), 8, 64)
    found, _ = remat.find(t.train_step.__wrapped__, {}, ((params, opt_state, batch), {}))
    assert len(found) == 1
    d = remat.differentiation(found[0])
    assert our_listing(d) == jax_listing(lambda p: t.loss_fn(p, batch, 4), params)
    assert d.api == "jax.value_and_grad" and d.function == "loss_fn"
    assert d.source is not None and d.source.endswith("transformer_adam.py:88")
    assert len(d.residuals) > 300


def test_nothing_differentiated_gives_no_remat_and_no_trace_again():
    traces = []

    def double(x):
        traces.append(1)
        return jax.jvp(jnp.sin, (x,), (x,))[1] * 2  # forward mode keeps no residuals

    with capture(advise="advised", remat_flops=remat.DEFAULT_MAX_FLOPS_INCREASE) as session:
        jax.jit(double)(jnp.ones(4))
    assert session.entries[0].remat is None and traces == [1]


def test_residuals_of_equinox_and_flax_in_their_terms():
    eqx = pytest.importorskip("equinox")
    nnx = pytest.importorskip("flax.nnx")
    model = eqx.nn.MLP(4, 1, width_size=8, depth=1, key=jax.random.key(0))
    x = jnp.ones((5, 4))

    def eqx_loss(model):
        return jnp.mean(jax.vmap(model)(x) ** 2)

    def nnx_loss(m):
        return jnp.mean(m(x) ** 2)

    with capture(advise="advised", remat_flops=remat.DEFAULT_MAX_FLOPS_INCREASE) as session:
        eqx.filter_jit(lambda m: eqx.filter_value_and_grad(eqx_loss)(m))(model)
        nnx.jit(lambda m: nnx.grad(nnx_loss)(m))(nnx.Linear(4, 1, rngs=nnx.Rngs(0)))
    first, second = (e.remat for e in session.entries)
    assert first is not None and second is not None
    (d,) = first.differentiations
    assert (d.api, d.function) == ("eqx.filter_value_and_grad", "eqx_loss")
    assert remat.code(d, "dots_saveable") == (
        "eqx.filter_value_and_grad(eqx.filter_checkpoint(eqx_loss, "
        "policy=jax.checkpoint_policies.dots_saveable))")
    assert all(v.error is None for v in first.variants)
    (d,) = second.differentiations
    assert (d.api, d.function) == ("nnx.grad", "nnx_loss")
    assert remat.code(d, "nothing_saveable").startswith("nnx.grad(nnx.remat(nnx_loss, ")
    assert all(v.error is None for v in second.variants)


# ------------------------------------------------------ policies, measured --


def _step_with(loss_fn: Any, policy: str | None, donate: tuple[str, ...] = ()) -> Any:
    grad = (jax.value_and_grad(loss_fn) if policy is None else jax.value_and_grad(
        jax.checkpoint(loss_fn, policy=remat.policy_object(policy))))

    def train_step(params, x):
        loss, grads = grad(params, x)
        return [p - 0.1 * g for p, g in zip(params, grads, strict=True)], loss

    return jax.jit(train_step, donate_argnames=donate)


def _figures(jitted: Any, *args: Any) -> tuple[int | None, float | None]:
    compiled = jitted.lower(*args).compile()
    return memory_figures(compiled.memory_analysis()).peak_bytes, _compat.executables.flops(compiled)


@pytest.fixture(scope="module")
def activations() -> tuple[Any, Report]:
    sample = _sample("activations")
    from memscope.assemble.run import build_report

    params = sample.init_params(jax.random.key(0), 4, 128)
    x = jax.random.normal(jax.random.key(1), (8192, 128))
    with capture(advise="advised", remat_flops=remat.DEFAULT_MAX_FLOPS_INCREASE) as session:
        fresh = jax.jit(sample.train_step.__wrapped__)
        fresh(params, x)
    return sample, build_report(session.entries, None, session.runtime())


def test_each_policy_equals_a_direct_compile(activations):
    sample, report = activations
    fn = report.functions[0]
    assert fn.remat is not None and fn.remat.error is None
    assert tuple(v.policy for v in fn.remat.variants) == MEASURED
    params = sample.init_params(jax.random.key(0), 4, 128)
    x = jax.random.normal(jax.random.key(1), (8192, 128))
    for v in fn.remat.variants:
        policy = None if v.policy == "as_written" else v.policy
        assert (v.peak_bytes, v.flops) == _figures(_step_with(sample.loss_fn, policy),
                                                   params, x), v.policy
        assert v.offloads == (v.policy in remat.OFFLOAD_POLICIES)
    assert fn.memory is not None and fn.remat.variants[0].peak_bytes == fn.memory.peak_bytes


def test_printed_advice_gives_the_predicted_peak(activations):
    sample, report = activations
    fn = report.functions[0]
    assert fn.remat is not None
    a = fn.remat.advice
    # params (256 KiB) hold under 1% of the peak the activations make: no donation
    # is advised (nor compiled), so the policy is advised alone.
    assert a is not None and not a.combined and a.donation is None
    assert fn.advice is None and sum(b.bytes for b in fn.inputs if b.candidate) < (
        0.01 * fn.memory.peak_bytes)
    measured = {v.policy: v for v in fn.remat.variants}
    written = measured["as_written"]
    assert a.flops_after is not None and written.flops is not None
    assert a.flops_after <= written.flops * (1 + remat.DEFAULT_MAX_FLOPS_INCREASE)
    # The code as printed, evaluated in the sample's terms, then the donation.
    grad = eval(a.code, {"jax": jax, "loss_fn": sample.loss_fn})
    donate: dict[str, Any] = {}

    def train_step(params, x):
        loss, grads = grad(params, x)
        return [p - 0.1 * g for p, g in zip(params, grads, strict=True)], loss

    params = sample.init_params(jax.random.key(0), 4, 128)
    x = jax.random.normal(jax.random.key(1), (8192, 128))
    peak, flops = _figures(jax.jit(train_step, **donate), params, x)
    assert (peak, flops) == (a.peak_after, a.flops_after)
    assert a.peak_before is not None and peak is not None and peak < a.peak_before
    # The largest saving within the limit: no allowed policy has a lower peak.
    allowed = [v for v in fn.remat.variants if v.flops is not None
               and v.flops <= written.flops * (1 + a.max_flops_increase)]
    assert measured[a.policy].peak_bytes == min(v.peak_bytes or 0 for v in allowed)


def test_trace_again_prints_nothing_and_program_unchanged(capsys):
    def loss_fn(w, x):
        print("tracing loss_fn")
        return jnp.sum(jnp.tanh(x @ w) ** 2)

    def step(w, x):
        return jax.grad(loss_fn)(w, x)

    w, x = jnp.ones((8, 8)), jnp.ones((4, 8))
    expected = jax.jit(lambda w, x: step(w, x))(w, x)
    capsys.readouterr()
    with capture(advise="advised", remat_flops=remat.DEFAULT_MAX_FLOPS_INCREASE) as session:
        out = jax.jit(step)(w, x)
    assert capsys.readouterr().out == "tracing loss_fn\n"
    assert (out == expected).all()
    r = session.entries[0].remat
    assert r is not None and len(r.variants) == len(MEASURED)
    assert sys.stdout is sys.__stdout__ or not isinstance(sys.stdout, remat._ThreadFilter)


def test_hook_leaves_other_threads_alone():
    seen = []
    started, release = threading.Event(), threading.Event()

    def hook(f, primals, has_aux):
        seen.append(threading.get_ident())

    def worker():
        with remat.vjp_hook(hook):
            started.set()
            release.wait(10)

    t = threading.Thread(target=worker)
    t.start()
    started.wait(10)
    try:
        g = jax.grad(lambda w: jnp.sum(jnp.sin(w)))(jnp.ones(3))
    finally:
        release.set()
        t.join()
    assert seen == [] and jnp.allclose(g, jnp.cos(jnp.ones(3)))


def test_no_remat_unless_asked_for():
    with capture(advise="advised") as session:
        jax.jit(lambda w: jax.grad(lambda v: jnp.sum(v ** 2))(w))(jnp.ones(3))
    assert session.entries[0].remat is None


# ------------------------------------------------------------------ pure --


def _variants(*rows: tuple[str, int | None, float | None]) -> list[RematVariant]:
    return [RematVariant(p, peak, flops) for p, peak, flops in rows]


def test_choose_takes_the_largest_saving_within_the_flops_limit():
    vs = _variants(("as_written", 100, 1000.0), ("dots_saveable", 90, 1100.0),
                   ("nothing_saveable", 60, 1400.0), ("everything_saveable", 100, 1000.0))
    assert remat.choose(vs, 0.2) == vs[1]
    assert remat.choose(vs, 0.5) == vs[2]
    assert remat.choose(vs, 0.05) is None
    unknown = _variants(("as_written", 100, None), ("nothing_saveable", 50, 10.0))
    assert remat.choose(unknown, 1.0) is None  # unknown FLOPs are never "within"


def test_text_of_a_remat_section():
    d = remat.differentiation(remat.Found("jax.grad", "loss", "train.py:9", (
        jaxpr_facts.SavedResidual((1024, 1024), "float32", "output of tanh from t.py:3:4 (f)",
                            "tanh", "t.py:3", "f"),
        jaxpr_facts.SavedResidual((8,), "float32", "from the argument w", None, None, None))))
    variants = _variants(("as_written", 8 << 20, 100.0), ("nothing_saveable", 4 << 20, 130.0))
    r = Remat(differentiations=(d,), variants=tuple(variants), max_flops_increase=0.35,
              advice=remat.advice([d], variants, variants[1], 0.35))
    assert remat_text.remat_headline(r) == (
        "jax.grad(jax.checkpoint(loss, policy=jax.checkpoint_policies.nothing_saveable)): "
        "peak 8.0 MiB -> 4.0 MiB (saves 4.0 MiB), FLOPs +30.0%")
    assert remat_text.differentiation_line(d) == (
        "jax.grad(loss) at train.py:9 saves 4.0 MiB in 2 residuals for the backward pass")
    rows, more = remat_text.residual_lines(d, shown=1)
    assert rows == [("t.py:3", "4.0 MiB", "1 value", "tanh")]
    assert more == "and 1 more line (32 B)"
    assert [row.change for row in remat_text.policy_rows(r)] == [
        "", "peak -4.0 MiB, FLOPs +30.0%"]


def test_the_users_own_checkpoint_and_scan_are_named():
    def loss_fn(w, x):
        layer = jax.checkpoint(lambda h: jnp.tanh(h @ w),
                               policy=jax.checkpoint_policies.dots_saveable)
        h, _ = jax.lax.scan(lambda h, _: (layer(h), None), x, None, length=3)
        return jnp.sum(h ** 2)

    with capture(advise="advised", remat_flops=remat.DEFAULT_MAX_FLOPS_INCREASE) as session:
        jax.jit(lambda w, x: jax.grad(loss_fn)(w, x))(jnp.ones((8, 8)), jnp.ones((4, 8)))
    r = session.entries[0].remat
    assert r is not None and r.current_policies == ("dots_saveable",) and r.uses_scan
    written = r.variants[0]
    fn_memory = session.entries[0].facts
    assert fn_memory is not None and written.peak_bytes == fn_memory.memory.peak_bytes


def test_report_with_remat_reads_back_from_json(activations):
    _, report = activations
    assert Report.from_json(report.to_json()) == report


def test_terminal_and_html_put_the_advice_first(activations):
    from memscope.render.html import render_html
    from memscope.render.terminal import render_report

    _, report = activations
    out = io.StringIO()
    render_report(report, out, width=100, plain=True)
    text = out.getvalue()
    headline = remat_text.remat_headline(report.functions[0].remat)  # type: ignore[arg-type]
    assert headline is not None
    advice_at = text.index("Remat advice: jax.value_and_grad(jax.checkpoint(loss_fn,")
    assert advice_at < text.index("backward pass:") < text.index("nothing_saveable  ")
    assert "sample_programs/activations.py:30" in text.split("backward pass:")[1]
    page = io.StringIO()
    render_html(report, page)
    assert "Remat advice:" in page.getvalue() and "Backward pass" in page.getvalue()


def test_remat_setting_of_the_cli():
    default = remat.DEFAULT_MAX_FLOPS_INCREASE
    from memscope.options import remat_setting

    assert remat_setting(None, None, "advised") is None
    assert remat_setting(None, None, "full") == default
    assert remat_setting(True, None, "advised") == default
    assert remat_setting(None, 0.1, "advised") == 0.1
    assert remat_setting(False, None, "full") is None
    assert remat_setting(True, 0.1, "off") is None
