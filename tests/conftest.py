"""Test-wide set-up: eight simulated CPU devices, as the multi-device tests need.

XLA reads the flag once, when JAX starts its CPU backend, so it is set here,
before any test imports JAX. Programs the tests start in subprocesses inherit
it. Single-device code is unaffected: arrays live on device 0 unless sharded.
"""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

DEVICES_FLAG = "--xla_force_host_platform_device_count=8"

if "xla_force_host_platform_device_count" not in os.environ.get("XLA_FLAGS", ""):
    os.environ["XLA_FLAGS"] = f"{os.environ.get('XLA_FLAGS', '')} {DEVICES_FLAG}".strip()

# memscope's cache of the variants' compiles across runs (memscope.compiled.cache)
# would make what a test compiles depend on what ran before it: off for the suite
# (and the programs it starts), on in the tests of the cache itself.
os.environ["MEMSCOPE_CACHE"] = "off"

# Where libtpu is installed (the --target tests, tests/test_tpu_target.py), JAX
# would start its TPU client too, which on a machine without TPUs prints warnings
# about TPU environment variables into every program's stderr; and libtpu's
# lockfile would let only one process load it. The suite runs on the CPU.
if importlib.util.find_spec("libtpu") is not None:
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    os.environ.setdefault("ALLOW_MULTIPLE_LIBTPU_LOAD", "1")
# Likewise where the CUDA plugin is installed (the --target gpu tests,
# tests/test_gpu_target.py) on a machine without an NVIDIA GPU: JAX would try
# CUDA in every process and print that it failed. With a GPU, JAX uses it.
if (importlib.util.find_spec("jax_plugins") is not None
        and not os.path.exists("/dev/nvidiactl")):
    os.environ.setdefault("JAX_PLATFORMS", "cpu")


# The real-sized, version-agnostic end-to-end tests: everything run on the
# 8-layer transformer sample, and the benchmarks' smoke runs. They test nothing
# that differs between JAX series, and take most of the suite's time, so CI runs
# them on the newest series only (.ci/run: -m "not real_sized" for the older
# ones); `python -m pytest` runs them all. `pytest --collect-only -m real_sized`
# lists them.
_REAL_SIZED = ("transformer", "real_sized", "test_benchmarks.py", "test_large_reports.py")
# The version-agnostic end-to-end flows: what they test is memscope's own code
# above the capture (source edits, the runner's endings, the command line and
# its errors, notebooks, the docs' commands, an installed wheel); what they
# capture is tested on every series by the capture, fate and advice tests. CI
# runs them on the newest series only, as the real-sized ones.
_AGNOSTIC = ("tests/test_fix.py", "tests/test_endings.py", "tests/test_docs_ci.py",
             "tests/test_notebook.py", "tests/test_cli_errors.py", "tests/test_check_cli.py",
             "tests/test_installed.py", "tests/test_render_",
             # the distribution's name and .ci/package's checks (CI builds the
             # wheel once, beside the newest series)
             "tests/test_package.py",
             # memscope bisect: environments of their own for the releases it
             # tries, whatever the series running the suite
             "tests/test_bisect.py",
             # the role bar and the trace's role counters drawn from a report
             # (the roles themselves: test_roles, on every series)
             "tests/test_html_roles.py", "tests/test_trace_roles.py",
             "tests/test_roles.py::test_memscope_diff_explains_two_reports",
             # the runner's endings, `memscope show`, the command line's errors and
             # a run again from the cache, end to end (test_early and
             # test_compile_cache's other tests check the cache on every series)
             "tests/test_samples.py::test_show_renders_a_saved_report_again",
             "tests/test_samples.py::test_a_failing_target_still_reports_what_was_captured",
             "tests/test_samples.py::test_ctrl_c_interrupts_and_still_reports",
             "tests/test_fit.py::test_bad_input_is_one_line_and_exit_2",
             "tests/test_fit.py::test_fit_shows_its_compiles_on_a_terminal_only",
             "tests/test_compile_cache.py::test_memscope_run_again_reports_the_same",
             # the pytest plugin's markers and fixture (what they capture is the
             # capture's), the printed advice applied and checked (the advice
             # itself: test_advice), fit's choice of arguments and axes and its
             # rendering, the post-mortem's place in the report, memscope's own
             # policies (the first 50 functions advised, a prediction dropped)
             "tests/test_pytest_plugin.py", "tests/test_advice_consistent.py",
             "tests/test_fit.py::test_several_batch_arguments",
             "tests/test_fit.py::test_fit_takes_a_negative_batch_axis",
             "tests/test_fit.py::test_a_batch_that_leaves_out",
             "tests/test_oom.py::test_the_report_opens_with_the_post_mortem",
             "tests/test_worker.py::test_many_small_functions",
             "tests/test_early.py::test_a_prediction_the_advice_does_not_take")
# The same end-to-end check repeated over every sample program: the older series
# run it on the samples below, one for each way of calling JAX the samples
# cover (a donation JAX warns about, jax.Ref, a mesh; a wrapper library is
# test_wrappers', several processes test_sharding's); the newest series on all.
# What the other samples differ in (which fates, which advice) is checked on
# every series by test_samples and the advice tests.
_BREADTH_ON_EVERY_SERIES = ("unusable_donation.py", "ref_step.py", "data_parallel.py")
# ... and the lifetime check under one set of options of two.
_BREADTH_PARAMETERS = {
    "tests/test_runtime.py::test_same_output_and_same_live_arrays_with_and_without_memscope":
        tuple(f"[{p}]" for p in _BREADTH_ON_EVERY_SERIES),
    "tests/test_lifetimes.py::test_nothing_the_program_let_go_of_lives_on_under_memscope":
        ("[options0]",),
    # fit on the steps users write: on the older series the two wrappers whose
    # private jit internals memscope/_frameworks.py reads (Flax NNX, Equinox);
    # the plain-jit steps, the plan, the samples and fit's own choices on the
    # newest series (fit's logic above the retrace is the same on every series)
    "tests/test_fit_frameworks.py::test_fit_answers_each_framework_step_held_to_its_own_compile":
        ("[nnx_step]", "[equinox_step]"),
    "tests/test_fit_frameworks.py::test_fit_plan_gives_rows": (),
    "tests/test_fit_frameworks.py::test_fit_and_plan_answer_on_the_framework_samples": (),
    "tests/test_fit_frameworks.py::test_fit_function_waits": (),
    "tests/test_fit_frameworks.py::test_a_batch_the_step_does_not_compute_on": (),
    "tests/test_fit_frameworks.py::test_a_batch_given_on_an_argument_without_arrays": (),
    # a public notebook's growth (memscope's rule over samples): the newest series
    "tests/test_between.py::test_a_public_notebook_that_makes_new_state": (),
}
# The end-to-end tests: each runs memscope (or the program) in a process of its
# own, through its command line, the import of JAX it hooks and the runner.
# Every version difference memscope follows is read in-process (memscope._compat), and
# tested there by the rest; CI runs these on the oldest series, on 0.10 (the
# newest Python 3.11 installs, whose XLA:CPU allocates outputs late) and on the
# newest (.ci/run's "in-process" runs leave them out).
_END_TO_END = ("tests/test_samples.py", "tests/test_runtime.py", "tests/test_oom.py",
               "tests/test_leak_checker.py::test_the_leak_checker_",
               "tests/test_staging.py", "tests/test_jax_settings.py", "tests/test_sharding.py",
               "tests/test_fit.py", "tests/test_fit_plan.py", "tests/test_fit_frameworks.py",
               "tests/test_source_lines.py",
               "tests/test_lifetimes.py",
               "tests/test_keys.py", "tests/test_refs.py::test_the_cli_reports",
               "tests/test_run_memory.py::test_sharded_donated_state",
               "tests/test_compile_cache.py::test_a_run_again", "tests/test_diff.py")
# What can differ between Pythons of one JAX (the newest series' other Python
# runs these): running a program as python does (runpy, sys.path, argv), the
# frames and their locals memscope reads (PEP 667 on 3.13), source positions,
# what the garbage collector lets go, the imports of every module, the samples.
_PYTHON = ("tests/test_runner.py", "tests/test_source_lines.py", "tests/test_user_code.py",
           "tests/test_between.py", "tests/test_capture.py", "tests/test_lifetimes.py",
           "tests/test_layout.py", "tests/test_fix_edit.py", "tests/test_samples.py",
           "tests/test_versions.py")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if any(word in item.nodeid for word in _REAL_SIZED):
            item.add_marker(pytest.mark.real_sized)
        if item.nodeid.startswith(_AGNOSTIC):
            item.add_marker(pytest.mark.agnostic)
        for test, kept in _BREADTH_PARAMETERS.items():
            if item.nodeid.startswith(test) and not item.nodeid.endswith(kept):
                item.add_marker(pytest.mark.breadth)
        if item.nodeid.startswith(_END_TO_END):
            item.add_marker(pytest.mark.end_to_end)
        if item.nodeid.startswith(_PYTHON):
            item.add_marker(pytest.mark.python)
    _skip_xla_cpu_facts_elsewhere(items)


def _skip_xla_cpu_facts_elsewhere(items: list[pytest.Item]) -> None:
    """Skips the tests marked ``xla_cpu("...")`` where JAX's backend is not the
    CPU: each holds what XLA:CPU compiles (a fusion, a loop's packing, an exact
    size, no host offload), which XLA:GPU and XLA:TPU do otherwise; the skip
    names the fact."""
    marked = [(item, marker) for item in items
              if (marker := item.get_closest_marker("xla_cpu")) is not None]
    if not marked:
        return
    import jax  # only where such a test was collected: this starts JAX's backend

    backend = jax.default_backend()
    if backend == "cpu":
        return
    for item, marker in marked:
        fact = marker.args[0] if marker.args else "what it compiles"
        item.add_marker(pytest.mark.skip(
            reason=f"an XLA:CPU fact: {fact} (this backend is {backend})"))


@pytest.fixture
def browser(tmp_path: Path) -> Iterator[Any]:
    """Headless Chromium under Selenium (tests/support/browser.py); a test that
    takes it is marked ``needs_driven_browser``, skipped where it cannot run."""
    from tests.support.browser import driven_chromium

    with driven_chromium(tmp_path) as driver:
        yield driver
