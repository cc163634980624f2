"""What is live at the peak, rendered: exact terminal text from hand-built records,
the JSON round trip, and the HTML chart driven in headless Chromium."""

from __future__ import annotations

import dataclasses
import io
import json
import re

from memscope.render.buffers import render_buffers
from memscope.render.html import render_html
from memscope.report import LiveAtPeak, LiveBuffer, MemoryTimeline, Report, SourceLine
from tests.support.browser import needs_driven_browser
from tests.support.records import breakdown_report

TIMELINE = MemoryTimeline(
    rule="schedule", steps=6, points=((0, 4096), (1, 6144), (2, 9216), (3, 7168), (5, 4096)),
    peak_bytes=9216, peak_step=2, peak_instruction="fusion.3", held_bytes=4096,
    temp_block_bytes=6144, temp_live_bytes=5120,
    peak_note="schedule peak 9.0 KiB, 1.0 KiB below memscope's peak (rule sum: 10.0 KiB)")
LIVE = LiveAtPeak(
    bytes=9216,
    buffers=(
        LiveBuffer("temporary", 3072, "f32[768]", "f32", "fusion.3", "fusion", "dot_general",
                   "jit(train_step)/dot_general", "train.py:57", live_from=1, live_to=3),
        LiveBuffer("parameter", 2048, "f32[512]", "f32", "p.0", "parameter", "parameter",
                   donated=False, argument="params['w']"),
        LiveBuffer("temporary", 2048, "f32[512]", "f32", "tanh.1", "tanh", "tanh",
                   source="train.py:58", live_from=2, live_to=2),
        LiveBuffer("output", 2048, "f32[512]", "f32", "add.2", "add", "add",
                   source="train.py:59")),
    by_source=(SourceLine("train.py:57", 3072, 1, ("dot_general",)),
               SourceLine("train.py:58", 2048, 1, ("tanh",)),
               SourceLine("train.py:59", 2048, 1, ("add",))),
    argument_bytes=2048, arguments=1)


def live_report(**changes) -> Report:
    report = breakdown_report()
    step = dataclasses.replace(report.functions[0], **{
        "memory_timeline": TIMELINE, "live_at_peak": LIVE, **changes})
    return dataclasses.replace(report, functions=(step, report.functions[1]))


def _render(report: Report) -> list[str]:
    out = io.StringIO()
    render_buffers(report, out, width=80, plain=True)
    return [line.rstrip() for line in out.getvalue().splitlines()]


def test_the_peak_comes_first_in_the_buffers_view():
    lines = _render(live_report())
    assert lines[1:10] == [
        "What holds the memory: train_step  train.py:12",
        "Live at the peak: 9.0 KiB at step 2 of 6 (fusion.3), from the compiled schedule",
        "over XLA's buffer assignment",
        "  arguments 2.0 KiB (1), outputs and constants 2.0 KiB, temporaries 5.0 KiB live",
        "of a 6.0 KiB block",
        "     3.0 KiB  train.py:57  (1 buffer: dot_general)",
        "     2.0 KiB  train.py:58  (1 buffer: tanh)",
        "     2.0 KiB  train.py:59  (1 buffer: add)",
        "  memory over program order: =*@#=",
    ]
    assert lines[10:12] == [
        "  schedule peak 9.0 KiB, 1.0 KiB below memscope's peak (rule sum: 10.0 KiB)",
        "allocations: parameter 4.0 MiB (2), aliased 4.0 MiB, temporary 3.0 MiB,"]
    # the schedule's curve stands in for the trace XLA did not record
    assert not any(line.startswith("memory over program order: n/a") for line in lines[:25])


def test_a_report_without_a_timeline_renders_as_before():
    lines = _render(breakdown_report())
    assert "Live at the peak" not in "\n".join(lines)
    assert "memory over program order: n/a (XLA recorded no trace here)" in lines


def test_the_timeline_round_trips_through_json():
    report = live_report()
    assert Report.from_json(report.to_json()) == report
    old = json.loads(report.to_json())
    for key in ("memory_timeline", "live_at_peak", "memory_timeline_note"):
        del old["functions"][0][key]  # a report written before the fields existed
    fn = Report.from_dict(old).functions[0]
    assert fn.memory_timeline is None and fn.live_at_peak is None


def _html(report: Report) -> str:
    out = io.StringIO()
    render_html(report, out)
    return out.getvalue()


def test_html_chart_marks_the_peak_and_holds_no_report_data_in_script():
    evil = live_report(live_at_peak=dataclasses.replace(LIVE, buffers=(dataclasses.replace(
        LIVE.buffers[0], source="<script>alert(1)</script>"),)))
    text = _html(evil)
    assert text.lower().count("<script") == 1
    script = text[text.index("<script>"):text.index("</script>")]
    assert "fusion.3" not in script and "alert" not in script
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in text
    chart = re.search(r'<svg class="memtimeline"[^<>]*>(.*?)</svg>', text, re.S)
    assert chart is not None
    assert len(re.findall(r'<rect class="pt"', chart.group(1))) == len(TIMELINE.points)
    assert re.search(r'<circle class="peak"[^>]*data-step="2" data-bytes="9216"', chart.group(1))
    assert "n/a: this report has no memory timeline" in _html(breakdown_report())


@needs_driven_browser
def test_html_peak_lists_its_buffers_on_hover_and_click(browser, tmp_path):
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.by import By

    page = tmp_path / "report.html"
    page.write_text(_html(live_report()), encoding="utf-8")
    browser.get(page.as_uri())
    chart = browser.find_element(By.CSS_SELECTOR, ".livechart")
    browser.execute_script("arguments[0].closest('details.fn').open = true", chart)
    readout = chart.find_element(By.CSS_SELECTOR, ".readout")
    peaklist = chart.find_element(By.CSS_SELECTOR, "details.peaklist")
    assert peaklist.get_attribute("open") is None
    rows = peaklist.find_elements(By.CSS_SELECTOR, "table.live tbody tr")
    assert not any(r.is_displayed() for r in rows)  # closed until the peak is asked

    point = chart.find_elements(By.CSS_SELECTOR, "rect.pt")[3]
    ActionChains(browser).move_to_element(point).perform()
    assert readout.text == "step 3: 7.0 KiB"

    ActionChains(browser).move_to_element(
        chart.find_element(By.CSS_SELECTOR, "circle.peak")).perform()
    assert readout.text == "peak: step 2, 9.0 KiB, fusion.3"
    assert peaklist.get_attribute("open") is not None
    shown = [r.text for r in rows if r.is_displayed()]
    assert len(shown) == 4 and "dot_general" in shown[0] and "params['w']" in shown[1]
    assert "not donated" in shown[1]

    browser.execute_script("arguments[0].open = false", peaklist)
    chart.find_element(By.CSS_SELECTOR, "circle.peak").click()
    assert peaklist.get_attribute("open") is not None


def test_run_buffers_shows_the_peak_and_saves_it(tmp_path, monkeypatch):
    from tests.support.cli import MATMUL_PROGRAM, invoke, write

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("COLUMNS", "100")
    write(tmp_path / "prog.py", MATMUL_PROGRAM)
    result = invoke("run", "--no-advice", "--buffers", "-o", "r.json", "prog.py")
    assert result.exit_code == 0, result.output
    (fn,) = json.loads((tmp_path / "r.json").read_text())["functions"]
    timeline, live = fn["memory_timeline"], fn["live_at_peak"]
    assert live["bytes"] == timeline["peak_bytes"] == max(b for _, b in timeline["points"])
    assert re.search(rf"^Live at the peak: .* at step {timeline['peak_step']} of "
                     rf"{timeline['steps']} \({re.escape(timeline['peak_instruction'])}\)",
                     result.stdout, re.M), result.stdout
    # the matmul's line holds memory at the peak, and the terminal names it
    lines = {s["source"]: s for s in live["by_source"]}
    assert "dot_general" in lines["prog.py:7"]["ops"]
    assert "prog.py:7" in result.stdout.split("allocations:")[0]
