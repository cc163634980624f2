"""The --buffers view and the HTML report: exact terminal text from hand-built records,
a self-contained HTML file that a real browser renders, and the CLI options."""

from __future__ import annotations

import dataclasses
import html
import io
import json
import os
import re
import shutil

import pytest

from memscope.render.buffers import render_buffers, sparkline
from memscope.render.html import render_html
from memscope.report import Report
from memscope.report.units import format_bytes
from tests.support.browser import (
    chromium,
    drive_leaf_table,
    needs_chromium,
    needs_driven_browser,
)
from tests.support.cli import MATMUL_PROGRAM, cli_error, invoke, write
from tests.support.records import breakdown, breakdown_report, sample_report
from tests.support.truth import split_product


def _render(report: Report) -> list[str]:
    out = io.StringIO()
    render_buffers(report, out, width=80, plain=True)
    return [line.rstrip() for line in out.getvalue().splitlines()]


def test_buffers_view_exact_text():
    assert _render(breakdown_report()) == [
        "",
        "What holds the memory: train_step  train.py:12",
        "allocations: parameter 4.0 MiB (2), aliased 4.0 MiB, temporary 3.0 MiB,",
        "thread-local 24 B (6)",
        "Largest temporary buffers (3 more: 12 B)",
        "+-------------------------------------------------------------------+",
        "| source      | op          | shape         |    size | instruction |",
        "|-------------+-------------+---------------+---------+-------------|",
        "| train.py:57 | dot_general | f32[512,1024] | 2.0 MiB | fusion.3    |",
        "| train.py:58 | tanh        | f32[256,1024] | 1.0 MiB | tanh.1      |",
        "| n/a         | copy        | f32[256,1024] | 1.0 MiB | copy.2      |",
        "+-------------------------------------------------------------------+",
        "Temporary buffers by source line",
        "+-----------------------------------------------+",
        "| source      |    size | buffers | ops         |",
        "|-------------+---------+---------+-------------|",
        "| train.py:57 | 2.0 MiB |       1 | dot_general |",
        "| train.py:58 | 1.0 MiB |       2 | tanh, mul   |",
        "| n/a         | 1.0 MiB |       4 | copy        |",
        "+-----------------------------------------------+",
        "temporary allocations: 3.0 MiB, equal to XLA's temp figure.",
        "Buffers reuse memory over program order, so per-line sums can exceed the",
        "allocation.",
        "memory over program order: n/a (XLA recorded no trace here)",
        "",
        "What holds the memory: eval_step  n/a",
        "buffer assignment: n/a (could not read the compiled program: boom)",
    ]


def test_buffers_view_with_a_timeline_and_a_mismatch():
    b = breakdown(reconciled=False, reconcile_note="64 B of constants are not counted",
                  temp_buffers=(), by_source=(), more_buffers=0, more_bytes=0,
                  timeline=((0, 10), (1, 40), (2, 20)), timeline_note=None,
                  replayed_peak=4204552,
                  live_at_peak=(breakdown().temp_buffers[0],))
    lines = _render(breakdown_report(b))
    assert lines[4:] == [
        "temporary allocations: 3.0 MiB; XLA's temp figure: 2.0 KiB. 64 B of constants",
        "are not counted",
        "memory over program order (replayed peak 4.0 MiB, XLA's peak 4.0 MiB):",
        "  :@=",
        "live at the peak: dot_general f32[512,1024] 2.0 MiB (train.py:57)",
        "",
        "What holds the memory: eval_step  n/a",
        "buffer assignment: n/a (could not read the compiled program: boom)",
    ]


def test_sparkline_keeps_each_stretch_maximum():
    assert sparkline([0, 9, 0, 0, 0, 3], 3) == "@ -"
    assert sparkline([], 10) == ""


def test_report_with_buffers_round_trips_through_json():
    report = breakdown_report(breakdown(timeline=((0, 1), (5, 9)), replayed_peak=9))
    assert Report.from_json(report.to_json()) == report
    old = json.loads(report.to_json())
    del old["functions"][0]["buffers"]  # a report written before the field existed
    assert Report.from_dict(old).functions[0].buffers is None


# --------------------------------------------------------------------- HTML --


def _html(report: Report) -> str:
    out = io.StringIO()
    render_html(report, out)
    return out.getvalue()


def test_html_is_self_contained_and_escapes_user_strings():
    report = breakdown_report()
    evil = dataclasses.replace(report.functions[0], name="<script>alert(1)</script>")
    text = _html(dataclasses.replace(report, functions=(evil, report.functions[1])))
    assert text.startswith("<!DOCTYPE html>")
    # one script, memscope's own, and it holds none of the report's text
    assert text.lower().count("<script") == 1
    script = text[text.index("<script>"):text.index("</script>")]
    assert "train_step" not in script and "alert" not in script
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in text
    assert not re.search(r"""(src|href)\s*=\s*["']?\s*(https?:)?//""", text, re.I)
    assert "http://" not in text and "https://" not in text
    assert "@import" not in text and "url(" not in text
    text = _html(report)
    for expected in ("train_step", "eval_step", "train.py:57", "dot_general",
                     "f32[512,1024]", "reuses_input", "unusable", "What holds the memory",
                     html.escape("params['w']"), "XLA recorded no trace here"):
        assert expected in text, expected
    assert text.count('<svg class="figures"') == 1  # eval_step has no figures


def test_html_draws_the_timeline_where_known():
    b = breakdown(timeline=((0, 10), (1, 40), (2, 20)), timeline_note=None, replayed_peak=40)
    text = _html(breakdown_report(b))
    chart = re.search(r'<svg class="timeline"[^<>]*>(.*?)</svg>', text, re.S)
    assert chart is not None
    points = re.search(r'<polyline points="([^"]*)"', chart.group(1))
    assert points is not None and len(points.group(1).split()) == 3


# -------------------------------------------------------------------- CLI --


@pytest.fixture
def program(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("COLUMNS", "100")
    write(tmp_path / "prog.py", MATMUL_PROGRAM)
    return tmp_path


def test_run_buffers_shows_the_matmul_line_and_show_repeats_it(program):
    result = invoke("run", "--no-advice", "--buffers", "-o", "r.json", "--html", "r.html",
                    "prog.py")
    assert result.exit_code == 0, result.output
    assert "What holds the memory: forward  prog.py:6" in result.stdout
    # the matmul's row: its product f32[64,256], 64.0 KiB, or where XLA:GPU split
    # the contraction, its partial products (tests.support.truth.split_product)
    rows = re.findall(r"\| prog\.py:7 +\| dot_general +\| (f32\[[\d,]+\]) +\| ([\d.]+ \w+) ",
                      result.stdout)
    assert any((parts := split_product(shape, 64, 256)) is not None
               and size == format_bytes(parts * 64 * 256 * 4) for shape, size in rows), (
        result.stdout)
    assert "equal to XLA's temp figure" in result.stdout
    page = (program / "r.html").read_text(encoding="utf-8")
    assert "prog.py:7" in page and "dot_general" in page
    again = invoke("show", "--buffers", "--html", "again.html", "r.json")
    assert again.exit_code == 0
    assert again.stdout == result.stdout
    assert (program / "again.html").read_text(encoding="utf-8") == page


def test_html_path_is_checked_before_the_run(program):
    message = cli_error("run", "--html", "missing/r.html", "prog.py")
    assert message.startswith("cannot write the report to missing/r.html: no folder")
    assert cli_error("show", "--html", "", "r.json") == (
        "cannot write the report: the --html path is empty")


# ---------------------------------------------------------------- browser --

@pytest.mark.browser
@needs_chromium
def test_html_renders_in_headless_chromium(tmp_path):
    b = breakdown(timeline=((0, 10), (1, 40), (2, 20)), timeline_note=None, replayed_peak=40)
    page = tmp_path / "report.html"
    page.write_text(_html(breakdown_report(b)), encoding="utf-8")

    dom = chromium(page, tmp_path, "--dump-dom")
    assert dom.returncode == 0, dom.stderr
    for expected in ("train_step", "eval_step", "train.py:57", "dot_general"):
        assert expected in dom.stdout, expected
    # the browser parsed the charts as SVG elements with their shapes inside
    figures = re.search(r'<svg class="figures"[^<>]*>(.*?)</svg>', dom.stdout, re.S)
    timeline = re.search(r'<svg class="timeline"[^<>]*>(.*?)</svg>', dom.stdout, re.S)
    assert figures is not None and timeline is not None, dom.stdout
    assert figures.group(1).count("<rect ") == 5
    assert re.search(r'<polyline points="[^"]+"', timeline.group(1))

    shot = tmp_path / "shot.png"
    result = chromium(page, tmp_path, f"--screenshot={shot}")
    assert result.returncode == 0, result.stderr
    data = shot.read_bytes()
    assert data.startswith(b"\x89PNG\r\n\x1a\n")
    width, height = int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")
    assert (width, height) == (1280, 2000)
    assert len(data) > 20_000, len(data)  # a blank page compresses to a few KiB
    if os.environ.get("MEMSCOPE_KEEP_SCREENSHOT"):
        shutil.copy(shot, os.environ["MEMSCOPE_KEEP_SCREENSHOT"])


def many_leaves_report(leaves: int = 5000, functions: int = 4) -> Report:
    """``functions`` functions (so their sections start closed), the first with ``leaves``."""
    from memscope.report import InputBuffer, OutputBuffer

    report = sample_report()
    fates = ("aliased", "not_donated", "pruned", "unusable", "donor")
    inputs = tuple(InputBuffer(f"params['block_{i // 10}']['w{i % 10}']", (i % 97 + 1,),
                               "float32", 4 * (i % 97 + 1), i % 5 != 1, fates[i % 5])  # type: ignore[arg-type]
                   for i in range(leaves))
    outputs = tuple(OutputBuffer(f"result[{i}]", (i + 1,), "float32", 4 * (i + 1), "new")
                    for i in range(leaves // 10))
    big = dataclasses.replace(report.functions[0], inputs=inputs, outputs=outputs,
                              name="big_step")
    others = tuple(dataclasses.replace(report.functions[0], name=f"step_{k}")
                   for k in range(functions - 1))
    return dataclasses.replace(report, functions=(big, *others))


@pytest.mark.browser
@needs_driven_browser
def test_html_leaf_table_sorts_filters_and_expands_at_5000_leaves(tmp_path, browser):
    from selenium.webdriver.common.by import By

    report = many_leaves_report()
    page = tmp_path / "report.html"
    page.write_text(_html(report), encoding="utf-8")
    browser.get(page.as_uri())
    shots = tmp_path
    browser.save_screenshot(str(shots / "first-screen.png"))
    # the answer comes before any section, and with 4 functions each section is closed
    answer = browser.find_element(By.ID, "answer")
    assert answer.is_displayed() and "big_step" in answer.text
    section = browser.find_element(By.ID, "fn0")
    assert section.get_attribute("open") is None
    view = section.find_element(By.CSS_SELECTOR, ".leafview")
    assert not view.is_displayed()
    section.find_element(By.TAG_NAME, "summary").click()
    assert section.get_attribute("open") is not None and view.is_displayed()
    first = drive_leaf_table(browser, view, shots, "big-step-filtered")
    fn = report.functions[0]
    assert len(first) == len(fn.inputs) + len(fn.outputs)
    assert [p for p, _, _ in first] == [b.path for b in (*fn.inputs, *fn.outputs)]
    if os.environ.get("MEMSCOPE_KEEP_SCREENSHOT"):
        shutil.copy(shots / "big-step-filtered.png", os.environ["MEMSCOPE_KEEP_SCREENSHOT"])
