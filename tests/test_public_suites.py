"""benchmarks/public_suites.py: JUnit outcomes and their comparison, on hand-written XML."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks import public_suites as ps

ROOT = Path(__file__).resolve().parent.parent


PLAIN = """<?xml version="1.0" encoding="utf-8"?>
<testsuites name="pytest tests"><testsuite name="pytest" errors="0" failures="1" tests="6">
<testcase classname="pkg.a_test.ATest" name="test_pass" time="0.1" />
<testcase classname="pkg.a_test.ATest" name="test_fail" time="0.1">
  <failure message="AssertionError: 1 != 2">Traceback
E   AssertionError: 1 != 2</failure></testcase>
<testcase classname="pkg.a_test.ATest" name="test_skip" time="0.0">
  <skipped type="pytest.skip" message="no GPU">reason</skipped></testcase>
<testcase classname="pkg.a_test.ATest" name="test_xfail" time="0.0">
  <skipped type="pytest.xfail" message="known" /></testcase>
<testcase classname="pkg.b_test" name="test_jit[2]" time="0.3" />
<testcase classname="pkg.b_test" name="test_only_plain" time="0.3" />
</testsuite></testsuites>
"""

UNDER = """<?xml version="1.0" encoding="utf-8"?>
<testsuites name="pytest tests"><testsuite name="pytest" errors="1" failures="1" tests="6">
<testcase classname="pkg.a_test.ATest" name="test_pass" time="0.1" />
<testcase classname="pkg.a_test.ATest" name="test_fail" time="0.1">
  <failure message="AssertionError: 1 != 2">E   AssertionError: 1 != 2</failure></testcase>
<testcase classname="pkg.a_test.ATest" name="test_skip" time="0.0">
  <skipped type="pytest.skip" message="no GPU" /></testcase>
<testcase classname="pkg.a_test.ATest" name="test_xfail" time="0.0" />
<testcase classname="pkg.b_test" name="test_jit[2]" time="0.3">
  <failure message="AttributeError: The 'sharding' attribute is not available&#10;more">
Traceback (most recent call last):
E   AttributeError: The 'sharding' attribute is not available on traced array</failure>
</testcase>
<testcase classname="pkg.b_test" name="test_only_memscope" time="0.3">
  <error message="failed on setup with &quot;KeyError&quot;">E   KeyError: 'x'</error></testcase>
</testsuite></testsuites>
"""


def test_parse_junit_reads_each_outcome_by_classname_and_name() -> None:
    outcomes = ps.parse_junit(PLAIN)
    assert {key: o.outcome for key, o in outcomes.items()} == {
        "pkg.a_test.ATest::test_pass": "passed",
        "pkg.a_test.ATest::test_fail": "failed",
        "pkg.a_test.ATest::test_skip": "skipped",
        "pkg.a_test.ATest::test_xfail": "skipped",
        "pkg.b_test::test_jit[2]": "passed",
        "pkg.b_test::test_only_plain": "passed",
    }
    assert outcomes["pkg.a_test.ATest::test_fail"].message == "AssertionError: 1 != 2"
    assert outcomes["pkg.a_test.ATest::test_skip"].message == "no GPU"


def test_failure_wins_over_a_teardown_error_and_repeated_keys_are_kept() -> None:
    text = """<testsuites><testsuite>
    <testcase classname="m" name="t"><failure message="f" /><error message="e" /></testcase>
    <testcase classname="m" name="t"><error message="e2" /></testcase>
    <testcase classname="m" name="t" />
    </testsuite></testsuites>"""
    outcomes = ps.parse_junit(text)
    assert [(k, o.outcome) for k, o in outcomes.items()] == [
        ("m::t", "failed"), ("m::t#2", "error"), ("m::t#3", "passed")]


def test_compare_lists_only_the_tests_whose_outcome_changed() -> None:
    differences = ps.compare(ps.parse_junit(PLAIN), ps.parse_junit(UNDER))
    assert [(d.test, d.plain, d.memscope) for d in differences] == [
        ("pkg.a_test.ATest::test_xfail", "skipped", "passed"),
        ("pkg.b_test::test_jit[2]", "passed", "failed"),
        ("pkg.b_test::test_only_plain", "passed", "missing"),
        ("pkg.b_test::test_only_memscope", "missing", "error"),
    ]
    jit = differences[1]
    assert jit.message.startswith("AttributeError: The 'sharding' attribute")
    assert ps.first_lines(jit) == [
        "AttributeError: The 'sharding' attribute is not available", "more",
        "E   AttributeError: The 'sharding' attribute is not available on traced array"]
    assert differences[2].message == "" and differences[2].details == ""


def test_identical_files_have_no_difference() -> None:
    assert ps.compare(ps.parse_junit(PLAIN), ps.parse_junit(PLAIN)) == []
    assert ps.compare({}, {}) == []


def test_reuse_renders_the_table_and_the_json_round_trips(tmp_path: Path,
                                                          capsys: pytest.CaptureFixture[str]
                                                          ) -> None:
    out = tmp_path / "suite"
    out.mkdir()
    (out / "plain.xml").write_text(PLAIN)
    (out / "memscope.xml").write_text(UNDER)
    (out / "timings.json").write_text(json.dumps({
        "plain": {"returncode": 1, "seconds": 10.0},
        "memscope": {"returncode": 1, "seconds": 25.0}}))
    report = tmp_path / "out.json"
    code = ps.main(["--project", str(tmp_path), "--name", "demo", "--out-dir", str(out),
                    "--reuse", "--json", str(report)])
    assert code == 1
    printed = capsys.readouterr().out
    header, row = printed.splitlines()[0], printed.splitlines()[2]
    assert "same outcome" in header and "ratio" in header
    assert row.split()[:7] == ["demo", "7", "3", "4", "10.0", "25.0", "2.5"]
    assert "pkg.b_test::test_jit[2]: plain passed, memscope failed" in printed
    results = ps.from_json(json.loads(report.read_text()))
    assert results[0].differences[1].test == "pkg.b_test::test_jit[2]"
    assert ps.render(results) + "\n" == printed


def test_node_id_finds_the_test_file_in_the_class_name(tmp_path: Path) -> None:
    (tmp_path / "pkg" / "_src").mkdir(parents=True)
    (tmp_path / "pkg" / "_src" / "a_test.py").write_text("")
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_jit.py").write_text("")
    assert ps.node_id("pkg._src.a_test.ATest::test_x[1]", tmp_path) == (
        "pkg/_src/a_test.py::ATest::test_x[1]")
    assert ps.node_id("tests.test_jit::test_y#2", tmp_path) == "tests/test_jit.py::test_y"
    assert ps.node_id("elsewhere::test_z", tmp_path) == "elsewhere::test_z"
