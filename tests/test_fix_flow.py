"""memscope.fix.flow: is a donated argument read after the call?

Each case is checked against what JAX does with the same code: where the check
says "read after", running it with the donation raises on the deleted array;
where it says safe, it runs.
"""

from __future__ import annotations

import textwrap

import jax
import jax.numpy as jnp
import pytest

from memscope.fix.flow import check_call, positional_parameters

STEP = '''\
import jax
import jax.numpy as jnp
from functools import partial

@partial(jax.jit, donate_argnums=(0,))
def step(params, x):
    return params + x, x
'''


def _verdict(body: str, donated=("params",)):
    text = STEP + textwrap.dedent(body)
    line = next(i for i, t in enumerate(text.splitlines(), 1) if "# call" in t)
    return text, check_call(text, line, ["step"], list(donated), positional_parameters(text, 6),
                            where=f"train.py:{line}"), line


def _runs(text: str) -> bool:
    """Whether the program runs with ``step`` donating ``params`` (JAX's own answer)."""
    try:
        exec(compile(text, "train.py", "exec"), {"__name__": "__main__"})
    except (RuntimeError, ValueError) as e:
        # "Array has been deleted"; on XLA:GPU "Donation requested for invalid buffer"
        assert "deleted" in str(e).lower() or "invalid buffer" in str(e).lower(), e
        return False
    return True


@pytest.mark.parametrize("body", [
    # rebound by the statement that calls
    """
    params = jnp.ones(4)
    for i in range(3):
        params, x = step(params, jnp.ones(4))  # call
    print(params)
    """,
    # rebound later, before any read
    """
    params = jnp.ones(4)
    new, x = step(params, jnp.ones(4))  # call
    params = new
    print(params)
    """,
    # inside a function, other functions' own `params` are theirs
    """
    def main():
        params = jnp.ones(4)
        params, x = step(params, jnp.ones(4))  # call
        return params

    def other(params):
        return params

    main()
    """,
])
def test_safe_code_is_safe(body):
    text, verdict, _ = _verdict(body)
    assert verdict.read is None and verdict.unchecked is None
    assert _runs(text)


@pytest.mark.parametrize(("body", "why"), [
    ("""
    params = jnp.ones(4)
    new, x = step(params, jnp.ones(4))  # call
    print(params)
    """, "is read again at line 11"),
    ("""
    params = jnp.ones(4)
    for i in range(2):
        new, x = step(params, jnp.ones(4))  # call
    """, "the loop at line 10 passes it again in its next iteration"),
    ("""
    params = jnp.ones(4)
    new, x = step(x=jnp.ones(4), params=params)  # call
    total = params.sum()
    """, "is read again at line 11"),
])
def test_reads_after_the_call_are_found(body, why):
    text, verdict, line = _verdict(body)
    assert verdict.read == f"params is donated at train.py:{line} but {why}"
    assert not _runs(text)


def test_a_donated_temporary_needs_no_check():
    _, verdict, _ = _verdict("""
    new, x = step(jnp.ones(4) * 2, jnp.ones(4))  # call
    """)
    assert verdict.read is None and verdict.unchecked is None


def test_an_attribute_assigned_again_by_the_call_is_safe():
    text, verdict, _ = _verdict("""
    class Trainer:
        def __init__(self):
            self.params = jnp.ones(4)

        def fit(self):
            for i in range(2):
                self.params, x = step(self.params, jnp.ones(4))  # call
            return self.params

    print(Trainer().fit())
    """)
    assert verdict.read is None and verdict.unchecked is None
    assert _runs(text)


def test_what_it_cannot_follow_it_says():
    _, verdict, _ = _verdict("""
    class State:
        params = jnp.ones(4)
    new, x = step(State.params, jnp.ones(4))  # call
    """)
    assert verdict.read is None
    assert verdict.unchecked == ("train.py:11 passes params as State.params, which this "
                                 "check cannot follow")
    _, verdict, _ = _verdict("""
    args = (jnp.ones(4), jnp.ones(4))
    new, x = step(*args)  # call
    """)
    assert "cannot follow (*args" in verdict.unchecked
    _, verdict, line = _verdict("print(1)  # call\n")
    assert verdict.unchecked == f"no call of step found at train.py:{line}"


def test_positional_labels_and_parameters():
    text = STEP + "a = jnp.ones(4)\nb, c = step(jnp.ones(4), a)  # call\nprint(a)\n"
    assert positional_parameters(text, 6) == ("params", "x")
    assert positional_parameters(text, 5) is None
    verdict = check_call(text, 9, ["step"], ["argument 1"], None, where="t.py:9")
    assert verdict.read == "a is donated at t.py:9 but is read again at line 10"
    # the same code run with argument 1 donated raises, as the check says
    donating = jax.jit(lambda p, x: (p + x, x), donate_argnums=(1,))
    a = jnp.ones(4)
    donating(jnp.ones(4), a)
    assert a.is_deleted()
