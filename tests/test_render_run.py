"""Device memory over the run in the HTML report: the chart from hand-built
records, its escaping, and the high-water mark driven in headless Chromium."""

from __future__ import annotations

import dataclasses
import html
import io
import re

from memscope.render.html import render_html
from memscope.render.html_run import run_chart
from memscope.report import Report
from tests.support.browser import needs_driven_browser
from tests.support.records import EVIL, POINTS, RUN, MiB, run_report, sample_report


def _html(report: Report) -> str:
    out = io.StringIO()
    render_html(report, out)
    return out.getvalue()


def _section(text: str) -> str:
    found = re.search(r'<section id="run-memory">.*?</section>', text, re.S)
    assert found is not None
    return found.group(0)


def test_the_section_answers_with_the_high_water_mark():
    text = _html(run_report())
    section = _section(text)
    assert text.index('id="answer"') < text.index('id="run-memory"') < text.index('id="fn0"')
    assert "<h2>Device memory over the run</h2>" in section
    answer = re.search(r'<p class="answer">(.*?)</p>', section, re.S)
    assert answer is not None
    assert html.unescape(re.sub(r"<[^>]+>", "", answer.group(1))) == (
        "Run's high-water mark: 7.0 MiB on cpu:0 at call 3, eval_step (train.py:88), sampled "
        "= 3.0 MiB alive outside its arguments + 4.0 MiB its own peak (rule sum).")
    chart = re.search(r'<svg class="runmemory"[^<>]*>(.*?)</svg>', section, re.S)
    assert chart is not None
    assert len(re.findall(r'<rect class="pt"', chart.group(1))) == len(POINTS)
    assert len(re.findall(r'<circle class="estimated"', chart.group(1))) == 1
    assert len(re.findall(r'<circle class="sampled"', chart.group(1))) == 3
    assert re.search(rf'<circle class="hwm"[^>]*data-call="3" data-bytes="{7 * MiB}"',
                     chart.group(1))
    assert '<details class="hwmparts">' in section
    assert "live arrays sampled before every call (3 of 4 calls)" in section


def test_report_strings_are_escaped_and_the_script_holds_no_data():
    text = _html(run_report())
    assert text.lower().count("<script") == 1  # the page's own script only
    script = text[text.index("<script>"):text.index("</script>")]
    assert "eval_step" not in script and "alert" not in script
    section = _section(text)
    # in the hovered label of call 3 and in the mark's groups
    assert section.count("&lt;script&gt;alert(1)&lt;/script&gt;") == 2


def test_a_report_without_run_memory_has_no_run_chart():
    assert 'id="run-memory"' not in _html(sample_report())
    assert 'id="run-memory"' not in _html(run_report(None))
    body = _html(run_report(None)).split("</head>")[1].split("<script>")[0]
    assert "runchart" not in body


def test_a_run_without_a_mark_says_so():
    section = run_chart(dataclasses.replace(RUN, high_water=None))
    assert "High-water mark: n/a (no call was sampled)" in section
    assert 'class="hwm"' not in section and "hwmparts" not in section


@needs_driven_browser
def test_hovering_a_call_and_the_mark(browser, tmp_path):
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.by import By

    page = tmp_path / "report.html"
    page.write_text(_html(run_report()), encoding="utf-8")
    browser.get(page.as_uri())
    chart = browser.find_element(By.CSS_SELECTOR, "#run-memory .runchart")
    readout = chart.find_element(By.CSS_SELECTOR, ".readout")
    parts = chart.find_element(By.CSS_SELECTOR, "details.hwmparts")
    assert parts.get_attribute("open") is None
    rows = parts.find_elements(By.CSS_SELECTOR, "table.hwmgroups tbody tr")
    assert not any(r.is_displayed() for r in rows)  # closed until the mark is asked

    points = chart.find_elements(By.CSS_SELECTOR, "rect.pt")
    ActionChains(browser).move_to_element(points[0]).perform()
    assert readout.text == ("call 1, train_step, sampled: resident 1.0 MiB + peak 2.0 MiB = "
                            "3.0 MiB; largest: train_step result[0] (state) 1.0 MiB")
    ActionChains(browser).move_to_element(points[1]).perform()
    assert readout.text.startswith("call 2, train_step, estimated from the sample before "
                                   "call 1: resident 1.0 MiB")
    ActionChains(browser).move_to_element(points[3]).perform()
    assert readout.text == "call 4, train_step, sampled: resident 2.0 MiB + peak n/a = 2.0 MiB"

    mark = chart.find_element(By.CSS_SELECTOR, "circle.hwm")
    ActionChains(browser).move_to_element(mark).perform()
    assert readout.text.startswith("Run's high-water mark: 7.0 MiB on cpu:0 at call 3")
    assert parts.get_attribute("open") is not None
    shown = [r.text for r in rows if r.is_displayed()]
    assert len(shown) == 3
    assert shown[0].startswith("train_step result[0] 52 2.0 MiB state train.py:40")
    assert shown[1].startswith(EVIL)  # shown literally, never run
    assert shown[2] == "and 2 more (4.0 KiB)"
    buffers = parts.find_elements(By.CSS_SELECTOR, "table.hwmbuffers tbody tr")
    assert [b.text.split()[:2] for b in buffers] == [["temporary", "dot_general"],
                                                     ["parameter", "params['w']"]]
    assert browser.execute_script(
        "return document.querySelectorAll('#run-memory script').length") == 0

    browser.execute_script("arguments[0].open = false", parts)
    chart.find_element(By.CSS_SELECTOR, "circle.hwm").click()
    assert parts.get_attribute("open") is not None
