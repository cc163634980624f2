"""Crafted and corrupt reports: one clear line and exit code 2 from show, diff and check."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from memscope.errors import ReportFormatError
from memscope.report import Report, load_report
from tests.support.cli import assert_one_line_error, invoke
from tests.support.records import sample_report


def _data() -> dict[str, Any]:
    return json.loads(sample_report().to_json())


def _set(path: tuple[Any, ...], value: Any) -> Callable[[dict[str, Any]], None]:
    def change(data: dict[str, Any]) -> None:
        *parents, last = path
        for key in parents:
            data = data[key]
        data[last] = value
    return change


def _buffers(timeline: Any) -> Callable[[dict[str, Any]], None]:
    return _set(("functions", 0, "buffers"),
                {"allocations": [], "temp_bytes": 0, "timeline": timeline})


CASES = {
    "a size of 10**400": (_set(("functions", 0, "memory", "peak_bytes"), 10**400),
                          "functions[0].memory.peak_bytes"),
    "a negative size": (_set(("functions", 0, "inputs", 1, "bytes"), -4096),
                        "functions[0].inputs[1].bytes"),
    "a negative shape": (_set(("functions", 0, "inputs", 0, "shape"), [1024, -1]),
                         "functions[0].inputs[0].shape[1]"),
    "a float count": (_set(("functions", 0, "calls"), 1.5), "functions[0].calls"),
    "a bool count": (_set(("functions", 0, "calls"), True), "functions[0].calls"),
    "NaN for a size": (_set(("functions", 0, "memory", "temp_bytes"), float("nan")),
                       "functions[0].memory.temp_bytes"),
    "a timeline triple": (_buffers([[0, 1], [1, 2, 3]]), "functions[0].buffers.timeline[1]"),
    "a timeline of text": (_buffers([["step", 1]]), "functions[0].buffers.timeline[0][0]"),
    "a timeline number": (_buffers(7), "functions[0].buffers.timeline"),
    "an unknown fate": (_set(("functions", 0, "inputs", 0, "fate"), ["aliased"]),
                        "functions[0].inputs[0].fate"),
}


def _crafted(tmp_path: Path, change: Callable[[dict[str, Any]], None]) -> Path:
    data = _data()
    change(data)
    path = tmp_path / "crafted.json"
    path.write_text(json.dumps(data))
    return path


@pytest.mark.parametrize("case", sorted(CASES))
def test_an_invalid_field_is_one_line_naming_it(tmp_path: Path, case: str) -> None:
    change, field = CASES[case]
    path = _crafted(tmp_path, change)
    good = tmp_path / "good.json"
    good.write_text(sample_report().to_json())
    for args in (("show", str(path)), ("diff", str(good), str(path)),
                 ("check", "--report", str(path), "--baseline", str(good))):
        result = invoke(*args)
        message = assert_one_line_error(result.exit_code, result.stdout, result.stderr)
        assert message.startswith(f"{path}: report.{field}: "), message


def test_deep_nesting_is_one_line(tmp_path: Path) -> None:
    path = tmp_path / "deep.json"
    path.write_text('{"schema": "memscope.report/1", "functions": ' + "[" * 100_000
                    + "]" * 100_000 + "}")
    result = invoke("show", str(path))
    message = assert_one_line_error(result.exit_code, result.stdout, result.stderr)
    assert "nested too deeply" in message


def test_a_number_longer_than_python_reads_is_one_line(tmp_path: Path) -> None:
    text = sample_report().to_json().replace('"calls": 20', '"calls": ' + "9" * 5000)
    path = tmp_path / "long.json"
    path.write_text(text)
    result = invoke("show", str(path))
    assert_one_line_error(result.exit_code, result.stdout, result.stderr)


def test_signed_fields_may_be_negative_and_sizes_at_their_bound_are_read(
        tmp_path: Path) -> None:
    data = _data()
    data["run"]["exit_code"] = -1
    data["functions"][0]["donate_argnums"] = [-1]
    data["functions"][0]["memory"]["peak_bytes"] = 2**63 - 1
    report = Report.from_dict(data)
    assert report.run is not None and report.run.exit_code == -1
    assert report.functions[0].memory is not None
    assert report.functions[0].memory.peak_bytes == 2**63 - 1
    data["functions"][0]["memory"]["peak_bytes"] = 2**63
    with pytest.raises(ReportFormatError, match="out of range"):
        Report.from_dict(data)


def test_a_saved_report_reads_back_equal(tmp_path: Path) -> None:
    path = tmp_path / "r.json"
    path.write_text(sample_report().to_json())
    assert load_report(str(path)) == sample_report()
