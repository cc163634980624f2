"""Framework jit wrappers (``eqx.filter_jit``, ``nnx.jit``) reported in the user's terms.

The ground truth is JAX's: every leaf's fate is checked against the alias map
of the program JAX compiled for the call (read from the executable's HLO
header, through the framework's own ``lower``), and against the buffers the
call left behind (a donated, aliased input is deleted and its output sits at
its old address). The spelling of donation is checked by compiling the
advised setting with the framework itself.
"""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
import warnings
from typing import Any

import jax
import pytest

from memscope.assemble.function import function_report
from memscope.capturing import capture
from memscope.report import FunctionReport
from memscope.variants.donation import Argument, Donation, FilterJit, NnxJit, wider_note
from tests.support.samples import sample_module

NOT_USABLE = "Some donated buffers were not usable"

# ------------------------------------------------------------ pure spelling --

# model (first), opt_state, x, and the function's own arrays (none here)
EQX_ARGS = (Argument(0, "model", True, (0, 1)), Argument(1, "opt_state", True, (2,)),
            Argument(2, "x", True, (3,)), Argument(None, "step", False, ()))


@pytest.mark.parametrize(("chosen", "warn", "text"), [
    ({0, 1, 2}, False, 'eqx.filter_jit(donate="all")'),
    ({0, 1, 2, 3}, True, 'eqx.filter_jit(donate="warn")'),
    ({1, 2}, False, 'eqx.filter_jit(donate="all-except-first")'),
    ({1, 2, 3}, True, 'eqx.filter_jit(donate="warn-except-first")'),
    (set(), False, 'eqx.filter_jit(donate="none")'),
    ({1}, False, 'donate only opt_state (no eqx.filter_jit setting donates exactly that; '
                 'the nearest is eqx.filter_jit(donate="all-except-first"))'),
])
def test_filter_jit_spelling(chosen, warn, text):
    assert Donation(frozenset(chosen)).setting(EQX_ARGS, FilterJit(warn=warn)) == text


def test_filter_jit_can_only_widen_to_its_two_groups():
    style = FilterJit()
    assert Donation(frozenset({1})).closest(EQX_ARGS, style) == Donation(frozenset({1, 2}))
    assert Donation(frozenset({0})).closest(EQX_ARGS, style) == Donation(frozenset({0, 1, 2}))
    assert Donation(frozenset()).closest(EQX_ARGS, style) == Donation(frozenset())
    assert Donation(frozenset({1})).closest(EQX_ARGS, "argnames") == Donation(frozenset({1}))
    wanted = Donation(frozenset({1}))
    assert wider_note(wanted.closest(EQX_ARGS, style), wanted, EQX_ARGS, style) == (
        "eqx.filter_jit donates all or none of its first argument and all or none of the "
        'others, so eqx.filter_jit(donate="all-except-first") also donates x, which the '
        "advisor did not pick: do not read them after the call.")
    assert wider_note(wanted, wanted, EQX_ARGS, "argnames") is None


def test_nnx_jit_spelling_keeps_the_users_keywords():
    both = Donation(frozenset({0, 1}))
    assert both.setting(EQX_ARGS, NnxJit("argnames")) == (
        'nnx.jit(donate_argnames=("model", "opt_state"))')
    assert both.setting(EQX_ARGS, NnxJit("argnums")) == "nnx.jit(donate_argnums=(0, 1))"
    assert Donation(frozenset()).setting(EQX_ARGS, NnxJit("argnums")) == "no donation"


# ------------------------------------------------------------------ helpers --


def _installed(*names: str) -> bool:
    return all(importlib.util.find_spec(name) is not None for name in names)


# The frameworks are test extras ([test] in pyproject.toml); memscope runs without them.
needs_equinox = pytest.mark.skipif(not _installed("equinox", "optax"),
                                   reason="needs equinox and optax (pip install -e '.[test]')")
needs_flax = pytest.mark.skipif(not _installed("flax", "optax"),
                                reason="needs flax and optax (pip install -e '.[test]')")


def _sample(name: str) -> Any:
    return sample_module(name)


def _alias_map(lowered: Any) -> dict[int, int]:
    """JAX's compiled ``{output: parameter}`` aliases, from the executable's HLO header."""
    header = lowered.compile().as_text().splitlines()[0]
    return {int(o or 0): int(p) for o, p in re.findall(r"\{(\d*)\}: \((\d+), \{\}", header)}


def _assert_fates_match_alias_map(fn: FunctionReport, aliases: dict[int, int],
                                  inputs: list[str], outputs: list[str]) -> None:
    """Every leaf carries the user's path, in JAX's flat order, and the fate the
    compiled alias map gives it."""
    assert [b.path for b in fn.inputs] == inputs
    assert [b.path for b in fn.outputs] == outputs
    by_parameter = {p: o for o, p in aliases.items()}
    for i, b in enumerate(fn.inputs):
        assert b.parameter == i, b.path  # nothing pruned in these programs
        if i in by_parameter:
            assert (b.fate, b.output) == ("aliased", outputs[by_parameter[i]]), b.path
        else:
            assert b.fate in ("unusable", "not_donated"), b.path
    for j, o in enumerate(fn.outputs):
        expected = ("reuses_input", inputs[aliases[j]]) if j in aliases else ("new", None)
        assert (o.fate, o.input) == expected, o.path


def _pointer(x: Any) -> int:
    return x.unsafe_buffer_pointer()


def _arrays(tree: Any) -> list[Any]:
    return [x for x in jax.tree.leaves(tree) if isinstance(x, jax.Array)]


# ----------------------------------------------------------------- Equinox --

EQX_LAYERS = [f"layers[{i}].{w}" for i in range(2) for w in ("weight", "bias")]
EQX_STATE = ([f"{n}[0].count" for n in ("opt_state",)]
             + [f"opt_state[0].{m}.{p}" for m in ("mu", "nu") for p in EQX_LAYERS])


def _equinox_inputs(m: Any) -> tuple[Any, ...]:
    import equinox as eqx

    model = eqx.nn.MLP(32, 1, width_size=64, depth=1, key=jax.random.key(0))
    opt_state = m.optimizer.init(eqx.filter(model, eqx.is_array))
    x, y = m.batch(jax.random.key(1))
    return model, opt_state, x, y


def _equinox_step(donate: str) -> tuple[Any, tuple[Any, ...]]:
    """The Equinox sample's step, jitted anew with ``donate``, and its inputs."""
    import equinox as eqx

    m = _sample("equinox_train")
    return eqx.filter_jit(m.train_step.__wrapped__, donate=donate), _equinox_inputs(m)


@needs_equinox
def test_equinox_sample_every_leaf_named_and_fated_as_jax_compiled_it():
    with capture(advise=False) as session:
        m = _sample("equinox_train")
        args = _equinox_inputs(m)
        old = _arrays(args)
        pointers = [_pointer(a) for a in old]
        out = m.train_step(*args)
        # after the call: Equinox's lower() would raise the warning its call silences
        aliases = _alias_map(m.train_step.lower(*args).lowered)
    (entry,) = session.entries
    fn = function_report(entry)
    assert fn.name == "train_step"
    assert fn.source is not None and fn.source.endswith("equinox_train.py:25")
    assert fn.setting == 'eqx.filter_jit(donate="all")'
    assert fn.donate_argnums == (0, 1, 2, 3)
    inputs = [f"model.{p}" for p in EQX_LAYERS] + EQX_STATE + ["x", "y"]
    outputs = (["filter_jit marker"] + [f"result[0].{p}" for p in EQX_LAYERS]
               + [p.replace("opt_state", "result[1]") for p in EQX_STATE] + ["result[2]"])
    _assert_fates_match_alias_map(fn, aliases, inputs, outputs)
    assert {b.path: b.fate for b in fn.inputs if b.fate != "aliased"} == {
        "x": "unusable", "y": "unusable"}
    # The runtime agrees: aliased inputs are gone and their outputs sit in their buffers.
    flat_out = dict(zip(outputs[1:], _arrays(out), strict=True))
    for b, array, pointer in zip(fn.inputs, old, pointers, strict=True):
        assert array.is_deleted() == (b.fate == "aliased"), b.path
        if b.output in flat_out:
            assert _pointer(flat_out[b.output]) == pointer, b.path


@needs_equinox
def test_equinox_unusable_is_reported_though_donate_all_silences_the_warning():
    def calls(*, measured: bool, donate: str) -> tuple[list[str], Any]:
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            if measured:
                with capture(advise=True) as session:
                    step, args = _equinox_step(donate)
                    step(*args)
                report = function_report(session.entries[0])
            else:
                step, args = _equinox_step(donate)
                step(*args)
                report = None
        return [str(w.message) for w in seen if NOT_USABLE in str(w.message)], report

    # Exactly what a plain run shows: nothing under "all", JAX's warning under "warn".
    assert calls(measured=False, donate="all")[0] == []
    silenced, fn = calls(measured=True, donate="all")
    assert silenced == []
    unusable = {b.path for b in fn.inputs if b.fate == "unusable"}
    assert unusable == {"x", "y"}
    assert any(NOT_USABLE in w for w in fn.warnings)  # JAX said it; Equinox hid it
    plain_warned = calls(measured=False, donate="warn")[0]
    warned, fn = calls(measured=True, donate="warn")
    assert len(plain_warned) == len(warned) == 1
    assert {b.path for b in fn.inputs if b.fate == "unusable"} == unusable
    assert fn.setting == 'eqx.filter_jit(donate="warn")'


@needs_equinox
def test_equinox_advice_is_written_in_filter_jit_terms_and_measures_that_setting():
    with capture(advise=True) as session:
        step, args = _equinox_step("none")
        step(*args)
    fn = function_report(session.entries[0])
    assert fn.setting == 'eqx.filter_jit(donate="none")'
    assert fn.donate_argnums == ()
    assert fn.advice is not None
    assert fn.advice.setting == 'eqx.filter_jit(donate="all")'
    assert fn.advice.add == ("model", "opt_state", "x", "y")
    assert fn.advice.caveat.startswith(
        "eqx.filter_jit donates all or none of its first argument and all or none of the "
        'others, so eqx.filter_jit(donate="all") also donates x, y, which the advisor did '
        "not pick")
    # The advised variant is what Equinox itself compiles for donate="all".
    real, args = _equinox_step("all")
    with pytest.warns(UserWarning, match=NOT_USABLE):  # Equinox's lower() does not silence
        stats = real.lower(*args).lowered.compile().memory_analysis()
    advised = next(v for v in fn.variants if v.name == "advised")
    assert advised.memory is not None
    assert advised.memory.alias_bytes == stats.alias_size_in_bytes > 0
    assert advised.memory.temp_bytes == stats.temp_size_in_bytes


@needs_equinox
def test_equinox_all_except_first_keeps_the_first_argument():
    with capture(advise=True) as session:
        step, args = _equinox_step("all-except-first")
        step(*args)
    fn = function_report(session.entries[0])
    assert fn.setting == 'eqx.filter_jit(donate="all-except-first")'
    assert fn.donate_argnums == (1, 2, 3)
    assert {b.path.split(".")[0] for b in fn.inputs if not b.donated} == {"model"}
    assert fn.advice is not None and fn.advice.tried == 'eqx.filter_jit(donate="all")'
    # the setting to write only where its compile measured it to help
    helps = fn.advice.peak_before - fn.advice.peak_after >= 0.01 * fn.advice.peak_before
    assert (fn.advice.setting, fn.advice.add) == (
        (fn.advice.tried, ("model",)) if helps else (None, ()))
    assert helps or fn.advice.reason.startswith('compiled with eqx.filter_jit(donate="all")')


# --------------------------------------------------------------------- NNX --

NNX_LAYERS = [f"layers[{i}].{w}" for i in range(2) for w in ("bias", "kernel")]
NNX_OPTIMIZER = (["optimizer.opt_state[0].count"]
                 + [f"optimizer.opt_state[0].{m}['layers'][{i}]['{w}']"
                    for m in ("mu", "nu") for i in range(2) for w in ("bias", "kernel")]
                 + ["optimizer.step"])


def _flax_step(jit: dict[str, Any] | None = None) -> tuple[Any, Any, Any, tuple[Any, ...]]:
    """The Flax sample's step (jitted anew with ``jit`` keywords when given) and
    its inputs."""
    from flax import nnx

    m = _sample("flax_train")
    step = m.train_step if jit is None else nnx.jit(m.train_step.fun, **jit)
    model = m.MLP((32, 64, 1), nnx.Rngs(0))
    optimizer = nnx.Optimizer(model, m.optax.adam(1e-2), wrt=nnx.Param)
    x, y = m.batch(jax.random.key(1))
    return nnx, m, step, (model, optimizer, x, y)


@needs_flax
def test_flax_sample_every_leaf_named_and_fated_as_jax_compiled_it():
    with capture(advise=False) as session:
        nnx, _, step, args = _flax_step()
        aliases = _alias_map(step.lower(*args).lowered)
        model, optimizer, x, y = args
        before = [*jax.tree.leaves(nnx.state(model)), *jax.tree.leaves(nnx.state(optimizer))]
        pointers = [_pointer(a) for a in before]
        step(*args)
    (entry,) = session.entries
    fn = function_report(entry)
    assert fn.name == "train_step"
    assert fn.source is not None and fn.source.endswith("flax_train.py:32")
    assert fn.setting == 'nnx.jit(donate_argnames=("model", "optimizer"))'
    state = [f"model.{p}" for p in NNX_LAYERS] + NNX_OPTIMIZER
    written = [f"{p} (written back)" for p in state]
    _assert_fates_match_alias_map(fn, aliases, [*state, "x", "y"], [*written, "result"])
    assert all(b.fate == "aliased" for b in fn.inputs[:len(state)])
    # The runtime agrees: old state deleted, the new state written back at its addresses.
    after = [*jax.tree.leaves(nnx.state(model)), *jax.tree.leaves(nnx.state(optimizer))]
    assert all(a.is_deleted() for a in before)
    assert [_pointer(a) for a in after] == pointers
    assert not x.is_deleted() and not y.is_deleted()


@needs_flax
@pytest.mark.parametrize(("jit", "setting"), [
    ({}, 'nnx.jit(donate_argnames=("model", "optimizer"))'),
    ({"donate_argnums": ()}, "nnx.jit(donate_argnums=(0, 1))"),
])
def test_flax_advice_is_written_in_nnx_jit_terms(jit, setting):
    with capture(advise=True) as session:
        _, _, step, args = _flax_step(jit)
        step(*args)
    fn = function_report(session.entries[0])
    assert fn.setting == "no donation"
    assert fn.advice is not None and fn.advice.setting == setting
    assert fn.advice.add == ("model", "optimizer")
    assert all(b.candidate for b in fn.inputs if b.path.startswith(("model", "optimizer")))


def test_no_framework_is_imported_by_memscope():
    code = ("import sys, memscope, memscope.capturing, memscope.assemble.run; "
            "print(sorted(m for m in ('equinox', 'flax', 'optax') if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True, timeout=120)
    assert done.stdout.strip() == "[]"

