"""Pure rules with hand-built records: SPEC parsing and resolution, settings, reasons."""

from __future__ import annotations

import pytest

from memscope.analysis.advice import annotate, candidates
from memscope.errors import MemscopeError
from memscope.report import InputBuffer, OutputBuffer
from memscope.variants.donation import (
    Argument,
    Donation,
    advised,
    as_written,
    donate_all,
    parse_donation,
    resolve_spec,
)

# step(params, opt_state, lr, batch=...) with lr static and batch passed by keyword
ARGS = (
    Argument(position=0, name="params", by_name=True, leaves=(0, 1)),
    Argument(position=1, name="opt_state", by_name=True, leaves=(2, 3)),
    Argument(position=None, name="batch", by_name=True, leaves=(4,)),
)
PARAMS = ("params", "opt_state", "lr", "batch")


def resolve(text: str) -> Donation:
    return resolve_spec(parse_donation(text), ARGS, function="step", parameters=PARAMS,
                        static={2, "lr"})


def test_specs_resolve_to_arguments():
    assert resolve("0").arguments == {0}
    assert resolve("0,1").arguments == {0, 1}
    assert resolve("opt_state, batch").arguments == {1, 2}
    assert resolve("3").arguments == {2}  # batch by number, though passed by keyword
    assert resolve("all").arguments == {0, 1, 2}
    assert resolve("none").arguments == set()


@pytest.mark.parametrize(("spec", "message"), [
    ("7", "--donate 7: step takes 4 arguments here (0 to 3); its arguments: "
          "params, opt_state, lr, batch"),
    ("opt_stat", "--donate opt_stat: step has no argument 'opt_stat'; its arguments: "
                 "params, opt_state, lr, batch"),
    ("2", "--donate 2: argument 2 of step is static; static arguments cannot be donated"),
    ("lr", "--donate lr: lr is a static argument of step; static arguments cannot be donated"),
])
def test_specs_that_do_not_apply_say_why(spec, message):
    with pytest.raises(MemscopeError) as e:
        resolve(spec)
    assert str(e.value) == message


@pytest.mark.parametrize("spec", ["", " ", "0,,1", "-1", "opt-state", "0;1"])
def test_malformed_specs_are_rejected(spec):
    with pytest.raises(MemscopeError, match=r"^--donate "):
        parse_donation(spec)


def test_settings_are_written_as_the_user_would():
    both = Donation(frozenset({0, 1}))
    assert both.setting(ARGS, "argnames") == 'donate_argnames=("params", "opt_state")'
    assert both.setting(ARGS, "argnums") == "donate_argnums=(0, 1)"
    assert Donation(frozenset({1})).setting(ARGS, "argnames") == 'donate_argnames=("opt_state",)'
    mixed = Donation(frozenset({0, 2}))
    assert mixed.setting(ARGS, "argnums") == 'donate_argnums=(0,), donate_argnames=("batch",)'
    assert Donation(frozenset()).setting(ARGS, "argnums") == "no donation"
    # jax.jit's own keywords: positions for positional arguments, names for keywords
    assert mixed.jit_options(ARGS) == ((0,), ("batch",))
    assert both.jit_options(ARGS) == ((0, 1), None)
    assert Donation(frozenset({2})).jit_options(ARGS) == (None, ("batch",))


def test_unnamed_positional_arguments_fall_back_to_numbers():
    varargs = (Argument(0, None, False, (0,)), Argument(1, None, False, (1,)))
    assert Donation(frozenset({0, 1})).setting(varargs, "argnames") == "donate_argnums=(0, 1)"


def test_as_written_all_and_advised():
    written = as_written(ARGS, (True, True, False, False, False))
    assert written.arguments == {0}
    assert donate_all(ARGS).arguments == {0, 1, 2}
    scalars = (*ARGS, Argument(3, "n", True, (5,), has_arrays=False))
    assert donate_all(scalars).arguments == {0, 1, 2}
    assert advised(ARGS, written, [3]).arguments == {0, 1}
    assert Donation(frozenset({1})).leaf_mask(ARGS, 5) == (False, False, True, True, False)


def _in(path, shape, fate, donated=True, output=None, dtype="float32"):
    return InputBuffer(path, shape, dtype, 4 * max(1, len(shape) and shape[0]), donated, fate,
                       output=output)


def _out(path, shape, fate="new", source=None, dtype="float32"):
    return OutputBuffer(path, shape, dtype, 4 * max(1, len(shape) and shape[0]), fate,
                        input=source)


def test_candidates_prefer_the_input_an_output_copies():
    inputs = (_in("a", (4,), "not_donated", False), _in("frozen", (4,), "not_donated", False))
    outputs = (_out("result[0]", (4,), "copy_of_input", "frozen"),)
    assert candidates(inputs, outputs) == {1: 0}
    (a, frozen) = annotate(inputs, outputs, same_size_donors=True)
    assert not a.candidate and frozen.candidate
    assert frozen.reason.startswith("result[0] has the same shape and dtype and is a copy of it")


def test_candidates_skip_pruned_and_outputs_already_reused():
    inputs = (_in("p", (4,), "aliased", output="result[0]"),
              _in("q", (4,), "pruned", False), _in("r", (4,), "not_donated", False))
    outputs = (_out("result[0]", (4,), "reuses_input", "p"), _out("result[1]", (4,)))
    assert candidates(inputs, outputs) == {2: 1}


def test_donor_left_to_xla_by_unconstrained_output_sharding():
    # Same shape and dtype, yet a donor: JAX leaves the alias to XLA when the
    # output's sharding is left to the compiler (multi-device programs).
    inputs = (_in("w", (8,), "donor", output="result[0]"),)
    (w,) = annotate(inputs, (_out("result[0]", (8,), "reuses_input", "w"),), same_size_donors=True)
    assert w.reason.startswith("JAX matched it with result[0] (same shape and dtype) but left "
                               "the alias to XLA")
    assert "XLA used it for result[0]. Nothing to change" in w.reason


def test_unused_donor_of_another_dtype_says_what_to_return():
    inputs = (_in("x", (8,), "donor"),)
    (x,) = annotate(inputs, (_out("result[0]", (8,), dtype="bfloat16"),), same_size_donors=True)
    assert "result[0] (bfloat16[8]) has the same element count" in x.reason
    assert x.reason.endswith("XLA did not use it, so it stays allocated. Return a float32[8] "
                             "output that can reuse it, or stop donating x.")


def test_before_jax_0_8_an_element_count_match_is_unusable_and_says_why():
    # JAX 0.7's _set_up_aliases pairs by shape and dtype only: x is unusable.
    inputs = (_in("x", (8,), "unusable"),)
    (x,) = annotate(inputs, (_out("result[0]", (8,), dtype="bfloat16"),),
                    same_size_donors=False)
    assert x.reason == ("No output is float32[8]. result[0] has its 8 elements, but this JAX "
                        "(before 0.8) pairs donations only by shape and dtype. Stop donating "
                        "x, or return its updated value.")


def test_unusable_with_a_matching_output_means_memory_kinds_differ():
    inputs = (_in("x", (8,), "unusable"),)
    (x,) = annotate(inputs, (_out("result[0]", (8,)),), same_size_donors=True)
    assert "their memory kinds differ" in x.reason
    assert x.reason.endswith("or stop donating x.")


def test_unusable_whose_element_count_matches_taken_outputs():
    inputs = (_in("a", (8,), "aliased", output="result[0]"),
              _in("b", (8,), "donor", dtype="int32"), _in("c", (8,), "unusable", dtype="int8"))
    outputs = (_out("result[0]", (8,), "reuses_input", "a"), _out("result[1]", (8,),
                                                                  dtype="bfloat16"))
    *_, c = annotate(inputs, outputs, same_size_donors=True)
    assert c.reason.startswith("No output is int8[8], and the outputs with its 8 elements "
                               "(result[0], result[1]) are taken by other donated arguments.")
