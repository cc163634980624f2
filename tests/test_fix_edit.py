"""memscope.fix.edit: each jit spelling edited in its own terms, and nothing else touched.

Each case is the whole file before and after: the edit is exactly the donation
keyword (and ``partial``'s import where a bare ``@jax.jit`` needs one), with
comments, quotes and layout as the user wrote them. Each edited text is also
compiled, so every edit is valid Python.
"""

from __future__ import annotations

import textwrap

import pytest

from memscope.errors import EXIT_FIX_REFUSED
from memscope.fix.edit import EditRequest, FixRefused, edit_source, parse_setting

NAMES = parse_setting('donate_argnames=("params", "opt_state")')


def _edit(before: str, function: str, setting: str, marker: str = "# <-") -> str:
    """Edit ``before`` at the line holding ``marker`` (removed from both texts)."""
    before = textwrap.dedent(before)
    line = next(i for i, text in enumerate(before.splitlines(), 1) if marker in text)
    after = edit_source(before, [EditRequest(line, function, parse_setting(setting))],
                        path="train.py")
    compile(after, "train.py", "exec")
    return after


def _same(after: str, expected: str) -> None:
    assert after == textwrap.dedent(expected)


def test_bare_decorator_becomes_partial_with_partial_imported_where_isort_puts_it():
    after = _edit('''\
        """Train."""
        import argparse
        import os

        import jax


        @jax.jit  # <- the step
        def step(params, opt_state, batch):
            return params, opt_state
        ''', "step", 'donate_argnames=("params", "opt_state")')
    _same(after, '''\
        """Train."""
        import argparse
        import os
        from functools import partial

        import jax


        @partial(jax.jit, donate_argnames=("params", "opt_state"))  # <- the step
        def step(params, opt_state, batch):
            return params, opt_state
        ''')


def test_bare_decorator_uses_the_files_own_name_for_partial():
    after = _edit('''\
        import functools as ft
        from jax import jit

        @jit  # <-
        def step(params, opt_state):
            return params, opt_state
        ''', "step", "donate_argnums=(0, 1)")
    _same(after, '''\
        import functools as ft
        from jax import jit

        @ft.partial(jit, donate_argnums=(0, 1))  # <-
        def step(params, opt_state):
            return params, opt_state
        ''')


def test_partial_decorator_gets_the_keyword_after_its_own():
    after = _edit('''\
        from functools import partial
        import jax

        @partial(jax.jit, static_argnames=('lr',))  # <-
        def step(params, opt_state, lr):
            return params, opt_state
        ''', "step", 'donate_argnames=("params", "opt_state")')
    _same(after, '''\
        from functools import partial
        import jax

        @partial(jax.jit, static_argnames=('lr',), donate_argnames=("params", "opt_state"))  # <-
        def step(params, opt_state, lr):
            return params, opt_state
        ''')


def test_functools_partial_decorator_changes_an_existing_donation_in_place():
    after = _edit('''\
        import functools
        import jax

        @functools.partial(
            jax.jit,
            donate_argnums=0,  # the params
            static_argnums=2,
        )
        def step(params, opt_state, lr):  # <-
            return params, opt_state
        ''', "step", "donate_argnums=(0, 1)")
    _same(after, '''\
        import functools
        import jax

        @functools.partial(
            jax.jit,
            donate_argnums=(0, 1),  # the params
            static_argnums=2,
        )
        def step(params, opt_state, lr):  # <-
            return params, opt_state
        ''')


def test_assignment_spelling_over_lines_keeps_its_trailing_comma_layout():
    after = _edit('''\
        import jax

        def sgd(params, grads):
            return params

        train_step = jax.jit(  # <-
            sgd,
            static_argnums=(),
        )
        ''', "sgd", 'donate_argnames=("params",)')
    _same(after, '''\
        import jax

        def sgd(params, grads):
            return params

        train_step = jax.jit(  # <-
            sgd,
            static_argnums=(),
            donate_argnames=("params",),
        )
        ''')


def test_assignment_spelling_on_one_line_and_inside_a_function():
    after = _edit('''\
        import jax

        def main(step):
            fast = jax.jit(step, static_argnums=2)  # <-
            return fast
        ''', "step", "donate_argnums=(0,)")
    _same(after, '''\
        import jax

        def main(step):
            fast = jax.jit(step, static_argnums=2, donate_argnums=(0,))  # <-
            return fast
        ''')


def test_jit_of_a_partial_of_the_function_is_the_functions_own():
    after = _edit('''\
        import functools, jax
        f = jax.jit(functools.partial(loss, scale=2))  # <-
        ''', "loss", "donate_argnums=(0,)")
    assert "jax.jit(functools.partial(loss, scale=2), donate_argnums=(0,))" in after


def test_equinox_bare_and_called_spellings():
    bare = _edit('''\
        import equinox as eqx

        @eqx.filter_jit  # <-
        def step(model, opt_state):
            return model, opt_state
        ''', "step", 'eqx.filter_jit(donate="all")')
    assert '@eqx.filter_jit(donate="all")  # <-\n' in bare
    changed = _edit('''\
        import equinox as eqx

        @eqx.filter_jit(donate='none')  # <-
        def step(model, opt_state):
            return model, opt_state
        ''', "step", 'eqx.filter_jit(donate="all-except-first")')
    assert '@eqx.filter_jit(donate="all-except-first")  # <-\n' in changed
    assigned = _edit('''\
        import equinox as eqx
        fast = eqx.filter_jit(step)  # <-
        ''', "step", 'eqx.filter_jit(donate="all")')
    assert 'fast = eqx.filter_jit(step, donate="all")  # <-\n' in assigned


def test_nnx_bare_and_called_spellings():
    bare = _edit('''\
        from flax import nnx

        @nnx.jit  # <-
        def step(model, optimizer, batch):
            return model
        ''', "step", 'nnx.jit(donate_argnames=("model", "optimizer"))')
    assert '@nnx.jit(donate_argnames=("model", "optimizer"))  # <-\n' in bare
    called = _edit('''\
        from flax import nnx

        @nnx.jit(static_argnums=3)  # <-
        def step(model, optimizer, batch, n):
            return model
        ''', "step", 'nnx.jit(donate_argnums=(0, 1))')
    assert "@nnx.jit(static_argnums=3, donate_argnums=(0, 1))  # <-\n" in called


def test_only_the_requested_line_changes_among_several_jits():
    before = textwrap.dedent('''\
        import jax
        a = jax.jit(f)
        b = jax.jit(g)  # <-
        c = jax.jit(g)
        ''')
    after = _edit(before, "g", "donate_argnums=(0,)")
    changed = [(x, y) for x, y in zip(before.splitlines(), after.splitlines(), strict=True)
               if x != y]
    assert changed == [("b = jax.jit(g)  # <-", "b = jax.jit(g, donate_argnums=(0,))  # <-")]


@pytest.mark.parametrize(("source", "function", "why"), [
    ("import jax\nf = jax.jit(g, **options)  # <-\n", "g", "built dynamically"),
    ("import jax\nf = jax.jit(g, donate_argnums=DONATE)  # <-\n", "g", "is not a literal"),
    ("import jax\ndef make(fn):\n    return jax.jit(fn)  # <-\n", "step", "jits fn, not step"),
    ("import jax\nf = make_fast(g)  # <-\n", "g", "no jit call or decorator of g"),
])
def test_refusals_are_one_line_with_the_documented_exit_code(source, function, why):
    with pytest.raises(FixRefused) as refused:
        _edit(source, function, "donate_argnums=(0,)")
    assert why in str(refused.value)
    assert "\n" not in str(refused.value)
    assert refused.value.exit_code == EXIT_FIX_REFUSED


def test_a_wrapper_spelling_the_advice_is_not_for_is_refused():
    with pytest.raises(FixRefused, match="jitted by a jax jit here"):
        _edit("import jax\nf = jax.jit(g)  # <-\n", "g", 'eqx.filter_jit(donate="all")')


def test_advice_the_wrapper_cannot_write_is_refused():
    with pytest.raises(FixRefused, match="not a setting a program can write"):
        parse_setting("donate only model (no eqx.filter_jit setting donates exactly that; "
                      'the nearest is eqx.filter_jit(donate="all"))')


def test_settings_parse_into_their_frameworks_keywords():
    assert NAMES.framework == "jax"
    assert NAMES.keywords == (("donate_argnames", '("params", "opt_state")'),)
    mixed = parse_setting('donate_argnums=(0,), donate_argnames=("lr",)')
    assert mixed.keywords == (("donate_argnums", "(0,)"), ("donate_argnames", '("lr",)'))
    assert parse_setting('eqx.filter_jit(donate="all")').keywords == (("donate", '"all"'),)
    assert parse_setting("nnx.jit(donate_argnums=(1,))").framework == "nnx"
