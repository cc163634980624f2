"""The pytest plugin, run by pytester: the limit_device_memory marker and the memscope fixture."""

from __future__ import annotations

import re
import textwrap

# Imported here, before pytester's in-process runs: pytester restores sys.modules
# after each run, and jaxlib cannot be imported a second time in one process.
import jax
import jax.numpy as jnp
import pytest

from memscope.report.units import format_bytes
from tests.support.inner_pytest import only_memscope_plugin
from tests.support.truth import expected_peak

pytest_plugins = ["pytester"]

#: Inner test files: a module-level jit (made at import, before any test runs)
#: whose peak is about 4 MiB, and one made inside the test.
JITTED = textwrap.dedent("""\
    import jax
    import jax.numpy as jnp
    import pytest

    @jax.jit
    def outer(x):
        return jnp.outer(x, x)

    def make_small():
        return jax.jit(lambda x: x * 2)
""")


def run_inner(pytester: pytest.Pytester, body: str, *args: str) -> pytest.RunResult:
    pytester.makepyfile(test_inner=JITTED + textwrap.dedent(body))
    # JAX warns of unusable donations; the outer suite turns warnings into errors.
    pytester.makeini("[pytest]\nfilterwarnings =\n    ignore:Some donated buffers\n")
    return pytester.runpytest("-p", "no:cacheprovider", *only_memscope_plugin(), *args)


def test_marker_fails_a_test_over_the_limit_naming_function_peak_and_buffers(
        pytester: pytest.Pytester) -> None:
    result = run_inner(pytester, """
        @pytest.mark.limit_device_memory("1 MiB")
        def test_over():
            outer(jnp.ones(1024))

        @pytest.mark.limit_device_memory("64 MiB")
        def test_under():
            outer(jnp.ones(1024))
    """)
    result.assert_outcomes(passed=1, failed=1)
    stats = jax.jit(lambda x: jnp.outer(x, x)).lower(jnp.ones(1024)).compile() \
        .memory_analysis()
    out, arg = format_bytes(stats.output_size_in_bytes), format_bytes(stats.argument_size_in_bytes)
    # the failure is the one line, without a traceback: what makes the peak, as
    # the first screen's roles line says it with each role's bytes (the result
    # and the argument: JAX's own output and argument sizes), then its largest parts
    assert ("limit_device_memory(1.0 MiB): outer (test_inner.py:6, signature x: float32[1024]): "
            f"peak {format_bytes(expected_peak(stats))} exceeds the limit 1.0 MiB; peak made of: "
            f"outputs {out} (100%), batch {arg} (<1%); largest parts: test_inner.py:7 mul "
            f"(f32[1024,1024]) {out}, x (argument) {arg}") in result.stdout.lines
    result.stdout.fnmatch_lines(["FAILED test_inner.py::test_over*"])
    assert "Traceback" not in result.stdout.str()


def test_marker_names_one_function(pytester: pytest.Pytester) -> None:
    result = run_inner(pytester, """
        @pytest.mark.limit_device_memory("64 KiB", function="<lambda>")
        def test_only_the_small_one():
            outer(jnp.ones(1024))
            make_small()(jnp.ones(8))

        @pytest.mark.limit_device_memory(65536, function="train_step")
        def test_named_function_not_called():
            outer(jnp.ones(1024))
    """, "-rf")
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines([
        "*limit_device_memory: this test called no jitted function named 'train_step' that "
        "memscope could see (it saw: outer)*"])


def test_marker_fails_a_test_that_calls_no_jitted_function(pytester: pytest.Pytester) -> None:
    result = run_inner(pytester, """
        @pytest.mark.limit_device_memory("1 GiB")
        def test_nothing():
            jnp.ones(3) + 1
    """)
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*this test called no jitted function that memscope could "
                                 "see*memscope.analyze(fn, *args)*"])


def test_marker_forbids_unusable_donation(pytester: pytest.Pytester) -> None:
    result = run_inner(pytester, """
        @pytest.mark.limit_device_memory("1 GiB", forbid_unusable_donation=True)
        def test_unusable():
            step = jax.jit(lambda a, b: a + b.sum(), donate_argnums=(0, 1))
            step(jnp.ones(4), jnp.ones(3))

        @pytest.mark.limit_device_memory("1 GiB")
        def test_unusable_allowed():
            step = jax.jit(lambda a, b: a + b.sum(), donate_argnums=(0, 1))
            step(jnp.ones(4), jnp.ones(3))
    """)
    result.assert_outcomes(passed=1, failed=1)
    assert ("limit_device_memory(1.0 GiB): <lambda> (test_inner.py:14, signature "
            "a: float32[4]; b: float32[3]): unusable donation: b (float32[3], 12 B)"
            ) in result.stdout.lines


def test_failing_test_keeps_its_own_failure(pytester: pytest.Pytester) -> None:
    result = run_inner(pytester, """
        @pytest.mark.limit_device_memory("1 B")
        def test_raises():
            outer(jnp.ones(4))
            raise RuntimeError("the test's own failure")
    """)
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*RuntimeError: the test's own failure*"])
    result.stdout.no_fnmatch_line("*exceeds the limit*")


@pytest.mark.parametrize(("marker", "message"), [
    ('"64 MiBs"', "@pytest.mark.limit_device_memory: not a size: '64 MiBs'*"),
    ("", "@pytest.mark.limit_device_memory takes (limit, function=None, "
         "forbid_unusable_donation=False)"),
    ('"1 MiB", functon="f"', "*; unknown argument 'functon'"),
    ("1.5", "*the limit must be a size such as \"64 MiB\" or a number of bytes, not 1.5"),
])
def test_malformed_marker(pytester: pytest.Pytester, marker: str, message: str) -> None:
    result = run_inner(pytester, f"""
        @pytest.mark.limit_device_memory({marker})
        def test_bad():
            outer(jnp.ones(4))
    """)
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines([f"*{message}"])


def test_fixture_analyze_returns_the_cli_report_object(pytester: pytest.Pytester) -> None:
    result = run_inner(pytester, """
        from memscope.report import FunctionReport

        def test_analyze(memscope):
            report = memscope.analyze(outer, jnp.ones(1024))
            assert isinstance(report, FunctionReport)
            assert report.name == "outer"
            assert report.memory.peak_bytes >= 1024 * 1024 * 4
            df = report.to_dataframe()
            assert list(df["kind"]) == ["input", "output"]
            assert list(df["bytes"]) == [4096, 4194304]

        @pytest.mark.limit_device_memory("1 MiB")
        def test_marker_sees_fixture_analyses(memscope):
            memscope.analyze(outer, jnp.ones(1024))
    """)
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(["*outer (test_inner.py:6*peak 4.0 MiB exceeds the limit*"])


def test_marker_is_registered_for_strict_markers(pytester: pytest.Pytester) -> None:
    result = run_inner(pytester, """
        @pytest.mark.limit_device_memory("64 MiB")
        def test_under():
            outer(jnp.ones(8))
    """, "--strict-markers")
    result.assert_outcomes(passed=1)


def test_plugin_loads_without_a_flag_and_imports_no_jax(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_plain="""
        import sys

        def test_plain(request):
            assert request.config.pluginmanager.has_plugin("memscope")
            assert "memscope.pytest_plugin" in sys.modules
            assert "jax" not in sys.modules
    """)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", *only_memscope_plugin(),
                                           "--strict-markers")
    result.assert_outcomes(passed=1)


def test_a_newer_jax_passes_under_warnings_as_errors_and_is_said_at_the_end(
        pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    """On a JAX newer than the verified series a measured test passes where
    warnings are errors, and the run's summary says the figures are unverified."""
    from memscope import _versions

    real = _versions.installed
    monkeypatch.setattr(_versions, "installed",
                        lambda name: "0.13.0" if name == "jax" else real(name))
    monkeypatch.setattr(_versions, "_unverified_said", [])
    pytester.makepyfile(test_inner=JITTED + textwrap.dedent("""
        @pytest.mark.limit_device_memory("64 MiB")
        def test_under():
            outer(jnp.ones(8))

        def test_fixture(memscope):
            memscope.analyze(make_small(), jnp.ones(8))
    """))
    pytester.makeini("[pytest]\nfilterwarnings =\n    error\n")
    result = pytester.runpytest("-p", "no:cacheprovider", *only_memscope_plugin())
    result.assert_outcomes(passed=2)
    line = ("memscope: warning: JAX 0.13.0 is newer than the series memscope is verified on "
            "(0.7 to 0.12); its figures are unverified: report differences to memscope's "
            "issue tracker")
    assert result.stdout.lines.count(line) == 1


def test_memscope_fixture_here(memscope) -> None:  # type: ignore[no-untyped-def]
    # This suite gets the fixture from the installed entry point, with no flag.
    report = memscope.analyze(jax.jit(lambda x: x + 1, donate_argnums=0), jnp.ones(16))
    assert [(b.path, b.fate) for b in report.inputs] == [("x", "aliased")]


def test_marker_counts_the_temporaries_and_names_them(pytester: pytest.Pytester) -> None:
    """XLA:CPU's own peak leaves the temporaries out: a 6 MiB limit passed a step
    holding 8 MiB of them. memscope's peak holds them, and the failure names them."""
    result = run_inner(pytester, """
        @jax.jit
        def step(x):
            return jnp.cos(jnp.sin(x) @ x.T) @ x[:, :1]

        @pytest.mark.limit_device_memory("6 MiB")
        def test_step():
            step(jnp.ones((1024, 1024)))
    """)
    result.assert_outcomes(failed=1)
    stats = jax.jit(lambda x: jnp.cos(jnp.sin(x) @ x.T) @ x[:, :1]).lower(
        jnp.ones((1024, 1024))).compile().memory_analysis()
    assert stats.temp_size_in_bytes > 0
    if jax.default_backend() == "cpu":
        assert stats.peak_memory_in_bytes < 6 * 2**20 < expected_peak(stats)
    (line,) = [x for x in result.stdout.lines if x.startswith("limit_device_memory(6.0 MiB)")]
    assert f"peak {format_bytes(expected_peak(stats))} exceeds the limit 6.0 MiB" in line
    # what makes the peak: its roles (the temporaries first), then its largest
    # parts: the temporaries, with their op and the line of test_inner.py that made them
    assert re.search(r"; peak made of: other temporaries [\d.]+ MiB \(\d+%\), .*; largest "
                     r"parts: .*test_inner\.py:14 (sin|cos|dot_general) \(f32\[1024,1024\]\) "
                     r"4\.0 MiB", line), line
