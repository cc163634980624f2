"""memscope's pytest plugin: a device-memory limit marker and a ``memscope`` fixture.

Registered through the ``pytest11`` entry point, so it is active wherever
memscope is installed, without a flag. It costs nothing until used: JAX is
imported only when a marked test runs or the fixture analyzes something, and
unmarked tests run untouched.

::

    @pytest.mark.limit_device_memory("64 MiB", function="train_step",
                                     forbid_unusable_donation=True)
    def test_train_step_fits():
        train_step(state, batch)

    def test_donation(memscope):
        report = memscope.analyze(train_step, state, batch)   # a FunctionReport
        assert report.memory.peak_bytes < 2**26
        report.to_dataframe()

The marker sees the jitted functions the test calls at top level: those made
while the test runs, those the test's module holds by name (``train_step``
above, defined there or imported with ``from ... import``), and those analyzed
through the fixture. A jitted function made elsewhere at import time and called
only from inside another module's code is invisible to it; the test then fails
saying so, never passes silently.
"""

from __future__ import annotations

import contextlib
from collections.abc import Generator, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pytest

from memscope import _versions
from memscope.check.judge import limit_problems
from memscope.errors import MemscopeError
from memscope.render.text import visible
from memscope.report.units import format_bytes, parse_size
from memscope.views.leaves import bounded

if TYPE_CHECKING:
    from memscope.capturing import Session
    from memscope.report import FunctionReport

MARKER = "limit_device_memory"
MARKER_HELP = (
    f"{MARKER}(limit, function=None, forbid_unusable_donation=False): fail the test when a "
    "jitted function it calls (or the one named) has a peak over limit (\"64 MiB\", "
    "\"2 GB\" or bytes), or, if asked, an unusable donation. From memscope.")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", MARKER_HELP)


def pytest_terminal_summary(terminalreporter: Any) -> None:
    """Where a test measured on a JAX whose figures are unverified (a newer
    series, or an older one allowed), say so once at the end, where a passing
    suite shows it too."""
    line = _versions.unverified_said()  # (imports no JAX)
    if line is not None:
        terminalreporter.write_line(f"memscope: warning: {line}", yellow=True)


@dataclass(frozen=True)
class _Limit:
    limit: int
    function: str | None
    forbid_unusable_donation: bool


class MemscopeFixture:
    """What the ``memscope`` fixture gives a test; ``reports`` are its analyses so far."""

    def __init__(self) -> None:
        self.reports: list[FunctionReport] = []

    def analyze(self, jitted: Any, *args: Any, **kwargs: Any) -> FunctionReport:
        """Call ``jitted(*args, **kwargs)`` once and report it: :func:`memscope.analyze`.

        Returns the same :class:`~memscope.report.FunctionReport` the CLI reports
        (``.memory``, ``.inputs``, ``.outputs``, ``.to_dataframe()``).
        """
        from memscope.flow import analyze

        report = analyze(jitted, *args, **kwargs)
        self.reports.append(report)
        return report


@pytest.fixture
def memscope() -> MemscopeFixture:
    """Analyze jitted functions from a test: ``memscope.analyze(fn, *args, **kwargs)``."""
    return MemscopeFixture()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Generator[None, Any, Any]:
    marker = item.get_closest_marker(MARKER)
    if marker is None:
        return (yield)
    spec = _read_marker(marker)
    from memscope.assemble.function import function_report
    from memscope.capturing import capture

    with capture() as session, _measured_globals(item, session):
        result = yield
    reports = [function_report(e) for e in session.entries]
    fixture = getattr(item, "funcargs", {}).get("memscope")
    if isinstance(fixture, MemscopeFixture):
        reports += fixture.reports
    _enforce(spec, reports)
    return result


def _read_marker(marker: pytest.Mark) -> _Limit:
    kwargs = dict(marker.kwargs)
    args = list(marker.args)
    if args and "limit" not in kwargs:
        kwargs["limit"] = args.pop(0)
    unknown = sorted(set(kwargs) - {"limit", "function", "forbid_unusable_donation"})
    if args or unknown or "limit" not in kwargs:
        pytest.fail(f"@pytest.mark.{MARKER} takes (limit, function=None, "
                    "forbid_unusable_donation=False)"
                    + (f"; unknown argument {unknown[0]!r}" if unknown else ""), pytrace=False)
    limit = kwargs["limit"]
    if isinstance(limit, int) and not isinstance(limit, bool) and limit >= 0:
        size = limit
    elif isinstance(limit, str):
        try:
            size = parse_size(limit)
        except MemscopeError as e:
            pytest.fail(f"@pytest.mark.{MARKER}: {e}", pytrace=False)
    else:
        pytest.fail(f"@pytest.mark.{MARKER}: the limit must be a size such as \"64 MiB\" "
                    f"or a number of bytes, not {limit!r}", pytrace=False)
    function = kwargs.get("function")
    if function is not None and not isinstance(function, str):
        pytest.fail(f"@pytest.mark.{MARKER}: function must be a function's name, "
                    f"not {function!r}", pytrace=False)
    return _Limit(size, function, bool(kwargs.get("forbid_unusable_donation", False)))


@contextlib.contextmanager
def _measured_globals(item: pytest.Item, session: Session) -> Iterator[None]:
    """Route the jit objects the test's module holds by name through ``session``.

    ``capture()`` sees jits made inside it; a test module's jitted functions
    were made at import, before the test, so they are wrapped here for the
    call and put back after.
    """
    from memscope.capturing import MeasuredJit

    function = getattr(item, "obj", None)
    namespace = getattr(getattr(function, "__func__", function), "__globals__", None)
    if not isinstance(namespace, dict):
        yield
        return
    saved = {}
    for name, value in list(namespace.items()):
        jitted = getattr(value, "_memscope_jitted", value) if _is_jit(value) else None
        if jitted is not None and _is_jit(jitted):
            saved[name] = value
            namespace[name] = MeasuredJit(jitted, jitted.__wrapped__, session)
    try:
        yield
    finally:
        namespace.update(saved)


def _is_jit(value: Any) -> bool:
    from memscope import _compat

    try:
        return bool(_compat.hooks.is_jit_object(value)) and hasattr(value, "__wrapped__")
    except Exception:  # a module global whose __getattr__ misbehaves is not a jit object
        return False


def _enforce(spec: _Limit, reports: list[FunctionReport]) -> None:
    called = sorted({r.name for r in reports})
    if spec.function is not None and spec.function not in called:
        pytest.fail(f"{MARKER}: this test called no jitted function named "
                    f"{spec.function!r} that memscope could see (it saw: "
                    f"{visible(bounded(called)) or 'none'})", pytrace=False)
    if not reports:
        pytest.fail(f"{MARKER}: this test called no jitted function that memscope could "
                    "see. memscope sees jax.jit functions made while the test runs and those "
                    "its module holds by name; for others use the memscope fixture: "
                    "memscope.analyze(fn, *args)", pytrace=False)
    problems = limit_problems(reports, spec.limit, function=spec.function,
                              forbid_unusable_donation=spec.forbid_unusable_donation)
    if problems:
        pytest.fail(f"{MARKER}({format_bytes(spec.limit)}): "
                    + "\n".join(visible(p) for p in problems), pytrace=False)
