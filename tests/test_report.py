"""The report model: JSON round trip, clear errors, DataFrame views, units, rendering."""

from __future__ import annotations

import io
import json

import pytest

from memscope.errors import ReportFormatError
from memscope.render.terminal import render_report
from memscope.report import (
    SCHEMA,
    Report,
)
from memscope.report.units import format_bytes
from tests.support.records import sample_report


def test_json_round_trip_is_exact():
    report = sample_report()
    text = report.to_json()
    assert json.loads(text)["schema"] == SCHEMA
    assert Report.from_json(text) == report


def test_json_has_the_documented_fields():
    data = json.loads(sample_report().to_json())
    assert {"schema", "memscope_version", "environment", "run", "functions"} <= set(data)
    assert {"jax", "jaxlib", "backend", "devices"} <= set(data["environment"])
    assert {"program", "argv", "outcome", "exit_code"} <= set(data["run"])
    assert "target" not in data["run"]  # "target" is the accelerator, the report's own
    fn = data["functions"][0]
    assert {"name", "source", "calls", "memory", "inputs", "outputs", "warnings"} <= set(fn)
    assert {"argument_bytes", "output_bytes", "alias_bytes", "temp_bytes",
            "generated_code_bytes", "peak_bytes"} <= set(fn["memory"])
    assert {"path", "shape", "dtype", "bytes", "donated", "fate", "output"} <= set(
        fn["inputs"][0])
    assert {"path", "shape", "dtype", "bytes", "fate", "input"} <= set(fn["outputs"][0])
    assert data["functions"][1]["memory"] is None  # unknown is null, never 0


def test_unknown_fields_are_ignored_and_new_fields_default():
    data = json.loads(sample_report().to_json())
    data["functions"][0]["a_future_field"] = 1
    del data["functions"][0]["inputs"][0]["in_warning"]
    report = Report.from_dict(data)
    assert report.functions[0].inputs[0].in_warning is False


def test_an_older_report_naming_its_program_target_still_loads():
    # Reports saved before the run's script was called "program" name it "target".
    data = json.loads(sample_report().to_json())
    data["run"] = {"target" if k == "program" else k: v for k, v in data["run"].items()}
    report = Report.from_dict(data)
    assert report.run is not None and report.run.program == "train.py"
    assert report == sample_report()
    data["run"]["program"] = "new.py"  # where both are there, "program" is read
    assert Report.from_dict(data).run.program == "new.py"


@pytest.mark.parametrize(("mutate", "message"), [
    (lambda d: d.pop("schema"), "not a memscope report"),
    (lambda d: d.update(schema="memscope.report/9"), "unsupported report schema"),
    (lambda d: d["functions"][0].pop("calls"), "report.functions[0]: missing field 'calls'"),
    (lambda d: d["functions"][0]["inputs"][0].update(fate="eaten"),
     "report.functions[0].inputs[0].fate: 'eaten' is not one of"),
    (lambda d: d["functions"][0].update(calls="many"),
     "report.functions[0].calls: expected int, got str"),
])
def test_malformed_reports_are_named_precisely(mutate, message):
    data = json.loads(sample_report().to_json())
    mutate(data)
    with pytest.raises(ReportFormatError, match=message.replace("[", r"\[").replace("]", r"\]")):
        Report.from_dict(data)


def test_corrupt_json_says_where():
    with pytest.raises(ReportFormatError, match=r"not valid JSON .* at line 2"):
        Report.from_json('{\n  "schema": }')


def test_dataframe_views():
    report = sample_report()
    summary = report.to_dataframe()
    assert list(summary["name"]) == ["train_step", "eval_step"]
    assert summary.loc[0, "peak_bytes"] == 4204552
    assert summary["peak_bytes"].isna().tolist() == [False, True]
    buffers = report.functions[0].to_dataframe()
    assert list(buffers["fate"]) == ["aliased", "unusable", "pruned", "reuses_input", "new"]
    assert buffers.loc[0, "partner"] == "result[0]['w']"


@pytest.mark.parametrize(("n", "text"), [
    (None, "n/a"), (0, "0 B"), (1023, "1023 B"), (1024, "1.0 KiB"), (1536, "1.5 KiB"),
    (4 * 1024**2, "4.0 MiB"), (3 * 1024**3 + 1, "3.0 GiB"), (-2048, "-2.0 KiB")])
def test_format_bytes_uses_iec_units(n, text):
    assert format_bytes(n) == text


EXPECTED_80 = """\
memscope report
program: train.py --lr 3e-4
run:     failed (exit code 3)
jax 0.10.2, jaxlib 0.10.2, backend cpu, 1 device (cpu)

train_step (train.py:12): peak 4.0 MiB per device
  problem: 1 leaf, 4.0 KiB, donated but unusable: no output can take the buffer,
      so it stays allocated: x
  note: 1 leaf, 4 B, never read, so dropped from the compiled program (pruned):
      step
eval_step (n/a): peak n/a per device
  problem: memscope could not read it: could not read the compiled program: boom

Compiled functions (bytes per device)
+---------------------------------------------------------------+
| function   | argument |  output |   alias |    temp |    peak |
|------------+----------+---------+---------+---------+---------|
| train_step |  4.0 MiB | 4.0 MiB | 4.0 MiB | 2.0 KiB | 4.0 MiB |
| eval_step  |      n/a |     n/a |     n/a |     n/a |     n/a |
+---------------------------------------------------------------+

train_step  train.py:12  20 calls
  signature: params: {w: float32[1024,1024]}; x: float32[1024]; step: int32[]
    leaf            shape        dtype       size  donated  fate          partner
    params['w']     (1024,1024)  float32  4.0 MiB  yes      aliased       result[0]['w']
    x               (1024,)      float32  4.0 KiB  yes      unusable
    step            ()           int32        4 B  no       pruned
    result[0]['w']  (1024,1024)  float32  4.0 MiB           reuses_input  params['w']
    result[1]       ()           float32      4 B           new
  JAX warned: Some donated buffers were not usable: float32[1024]. That is: x.
  terms:
"""


def test_terminal_rendering_at_80_columns_is_plain_and_exact():
    out = io.StringIO()
    render_report(sample_report(), out, width=80, plain=True, detail=True)
    lines = [line.rstrip() for line in out.getvalue().splitlines()]
    assert "\x1b[" not in out.getvalue()
    assert "\n".join(lines[:len(EXPECTED_80.splitlines())]) + "\n" == EXPECTED_80
    text = "\n".join(lines)
    assert "JAX warned: Some donated buffers were not usable: float32[1024]. That is: x." in text
    assert "could not read the compiled program: boom" in text
    assert "unusable: donated, but no output could take its buffer" in text
