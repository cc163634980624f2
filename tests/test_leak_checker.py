"""JAX's leak checker under memscope: the same leaks, with the same errors, as plainly.

``jax.checking_leaks()`` walks the referrers of a leaked tracer back to what
keeps it alive (``core._why_alive``), and indexes the referrers of every cell
and dict it meets: one that only a running frame holds (frames are invisible
to ``gc.get_referrers``) makes it fail with ``IndexError`` instead of naming the
leak. memscope's frames on the stack while JAX traces the user's function must
therefore hold the jit object, its function and the call's arguments in no
closure cell (a lambda over them, or a comprehension over them on Python 3.11,
where comprehensions are functions). The patterns are JAX's own tests
(``tests/api_test.py``: ``test_leak_checker_catches_a_jit_leak`` and
``test_leak_checker_catches_a_sublevel_leak``).
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from memscope.capturing.calls import CallRecorder
from memscope.capturing.jit import MeasuredJit
from tests.support.cli import MEMSCOPE
from tests.support.inner_pytest import only_memscope_plugin

LEAKS = '''
import jax
from jax import jit

def a_jit_leak():
    with jax.checking_leaks():
        lst = []

        @jit
        def f(x):
            lst.append(x)
            return x

        f(3)

def a_sublevel_leak():
    with jax.checking_leaks():
        @jit
        def f(x):
            lst = []

            @jit
            def g(x):
                lst.append(x)
                return x

            return g(x)

        f(3)

def no_leak():
    with jax.checking_leaks():
        @jit
        def f(x):
            return x * 2

        return float(f(3.0))
'''

SCRIPT = LEAKS + '''
for case in (a_jit_leak, a_sublevel_leak, no_leak):
    try:
        print(case.__name__, "returned", case())
    except Exception as e:
        print(case.__name__, type(e).__name__, str(e).splitlines()[0][:40])
'''

PYTEST_FILE = LEAKS + '''
import pytest

def test_a_jit_leak():
    with pytest.raises(Exception, match="Leaked"):
        a_jit_leak()

def test_a_sublevel_leak():
    with pytest.raises(Exception, match="Leaked trace DynamicJaxprTrace"):
        a_sublevel_leak()

def test_no_leak():
    assert no_leak() == 6.0
'''


def test_the_leak_checker_names_each_leak_as_plainly(tmp_path: Path) -> None:
    script = tmp_path / "leaks.py"
    script.write_text(SCRIPT)
    plain = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                           cwd=tmp_path, timeout=300)
    measured = subprocess.run([MEMSCOPE, "run", "-q", str(script)], capture_output=True,
                              text=True, cwd=tmp_path, timeout=300)
    assert plain.returncode == measured.returncode == 0, measured.stderr
    lines = plain.stdout.splitlines()
    assert [line.split(" ", 1)[0] for line in lines] == ["a_jit_leak", "a_sublevel_leak",
                                                         "no_leak"]
    assert all(line.split(" ", 1)[1].startswith("Exception Leaked trace DynamicJaxprTrace")
               for line in lines[:2]) and lines[2] == "no_leak returned 6.0"
    assert measured.stdout.startswith(plain.stdout)


def test_the_leak_checker_under_memscope_run_dash_m_pytest(tmp_path: Path) -> None:
    (tmp_path / "test_leaks.py").write_text(PYTEST_FILE)
    args = ["-m", "pytest", "-q", "-p", "no:cacheprovider", *only_memscope_plugin(),
            "test_leaks.py"]
    plain = subprocess.run([sys.executable, *args], capture_output=True, text=True,
                           cwd=tmp_path, timeout=300)
    measured = subprocess.run([MEMSCOPE, "run", "-q", *args], capture_output=True, text=True,
                              cwd=tmp_path, timeout=300)
    assert plain.returncode == 0, plain.stdout
    assert measured.returncode == 0, measured.stdout
    assert "3 passed" in measured.stdout


@pytest.mark.parametrize(("owner", "method"), [(MeasuredJit, "__call__"), (CallRecorder, "call"),
                                             (CallRecorder, "_first_call"),
                                             (CallRecorder, "_run_first")])
def test_no_frame_on_the_call_path_holds_a_closure_cell(owner: type, method: str) -> None:
    # The frames on the stack while JAX traces the user's function (any Python).
    code = getattr(owner, method).__code__
    assert code.co_cellvars == (), textwrap.shorten(
        f"{method} closes over {code.co_cellvars}: JAX's leak checker fails there", 200)
