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
import subprocess
from pathlib import Path

import pytest

from memscope.render.buffers import render_buffers, sparkline
from memscope.render.html import render_html
from memscope.report import (
    AllocationGroup,
    BufferBreakdown,
    Report,
    SourceLine,
    TempBuffer,
)
from memscope.report.units import format_bytes
from tests.test_cli_errors import cli_error, invoke, write
from tests.test_report import sample_report
from tests.truth import split_product


def breakdown(**changes) -> BufferBreakdown:
    b = BufferBreakdown(
        allocations=(AllocationGroup("parameter", 2, 4198400),
                     AllocationGroup("aliased", 1, 4194304),
                     AllocationGroup("temporary", 1, 3145728),
                     AllocationGroup("thread_local", 6, 24)),
        temp_bytes=3145728,
        temp_buffers=(
            TempBuffer("fusion.3", "fusion", "f32[512,1024]", 2097152, "dot_general",
                       "jit(train_step)/dot_general", "train.py:57", 4, 0),
            TempBuffer("tanh.1", "tanh", "f32[256,1024]", 1048576, "tanh",
                       "jit(train_step)/tanh", "train.py:58", 4, 2097152),
            TempBuffer("copy.2", "copy", "f32[256,1024]", 1048576, "copy", None, None, 4, 0)),
        more_buffers=3, more_bytes=12,
        by_source=(SourceLine("train.py:57", 2097152, 1, ("dot_general",)),
                   SourceLine("train.py:58", 1048576, 2, ("tanh", "mul")),
                   SourceLine(None, 1048588, 4, ("copy",))),
        reconciled=True, timeline=None, timeline_note="XLA recorded no trace here")
    return dataclasses.replace(b, **changes)


def breakdown_report(b: BufferBreakdown | None = None) -> Report:
    report = sample_report()
    step = dataclasses.replace(report.functions[0], buffers=b or breakdown())
    return dataclasses.replace(report, functions=(step, report.functions[1]))


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

PROGRAM = """\
import jax
import jax.numpy as jnp


@jax.jit
def forward(x, w):
    y = x @ w
    z = jnp.tanh(y) @ w.T
    return (z * 2).sum() + y.sum()


forward(jnp.ones((64, 128)), jnp.ones((128, 256)))
"""


@pytest.fixture
def program(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("COLUMNS", "100")
    write(tmp_path / "prog.py", PROGRAM)
    return tmp_path


def test_run_buffers_shows_the_matmul_line_and_show_repeats_it(program):
    result = invoke("run", "--no-advice", "--buffers", "-o", "r.json", "--html", "r.html",
                    "prog.py")
    assert result.exit_code == 0, result.output
    assert "What holds the memory: forward  prog.py:6" in result.stdout
    # the matmul's row: its product f32[64,256], 64.0 KiB, or where XLA:GPU split
    # the contraction, its partial products (tests.truth.split_product)
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

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


def _chromium(page: Path, tmp_path: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    assert CHROMIUM is not None
    return subprocess.run(
        [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
         "--no-first-run", "--disable-background-networking", "--disable-component-update",
         "--disable-sync", "--disable-dev-shm-usage", f"--user-data-dir={tmp_path / 'profile'}",
         "--window-size=1280,2000", *extra, page.as_uri()],
        capture_output=True, text=True, timeout=120, check=False)


@pytest.mark.browser
@pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed (.ci/run installs "
                    "it with apt-get; without apt the browser check cannot run)")
def test_html_renders_in_headless_chromium(tmp_path):
    b = breakdown(timeline=((0, 10), (1, 40), (2, 20)), timeline_note=None, replayed_peak=40)
    page = tmp_path / "report.html"
    page.write_text(_html(breakdown_report(b)), encoding="utf-8")

    dom = _chromium(page, tmp_path, "--dump-dom")
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
    result = _chromium(page, tmp_path, f"--screenshot={shot}")
    assert result.returncode == 0, result.stderr
    data = shot.read_bytes()
    assert data.startswith(b"\x89PNG\r\n\x1a\n")
    width, height = int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")
    assert (width, height) == (1280, 2000)
    assert len(data) > 20_000, len(data)  # a blank page compresses to a few KiB
    if os.environ.get("MEMSCOPE_KEEP_SCREENSHOT"):
        shutil.copy(shot, os.environ["MEMSCOPE_KEEP_SCREENSHOT"])


# ------------------------------------------------------- browser, driven --

CHROMEDRIVER = shutil.which("chromedriver")
try:
    import selenium  # noqa: F401
    SELENIUM = True
except ImportError:
    SELENIUM = False

needs_driven_browser = pytest.mark.skipif(
    CHROMIUM is None or CHROMEDRIVER is None or not SELENIUM,
    reason="driving the HTML report needs chromium, chromedriver (apt: chromium "
           "chromium-driver, as .ci/run installs) and selenium (the test extra)")


@pytest.fixture
def browser(tmp_path):
    """Headless Chromium under Selenium, with a fresh profile and no network use."""
    from selenium import webdriver
    from selenium.webdriver.chrome.options import Options
    from selenium.webdriver.chrome.service import Service

    options = Options()
    options.binary_location = CHROMIUM
    for arg in ("--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                "--disable-background-networking", "--disable-component-update",
                "--disable-sync", "--no-first-run", f"--user-data-dir={tmp_path / 'profile'}",
                "--window-size=1280,1600"):
        options.add_argument(arg)
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    try:
        yield driver
    finally:
        driver.quit()


def leaf_rows(view) -> list:
    from selenium.webdriver.common.by import By

    return view.find_elements(By.CSS_SELECTOR, "table.leaves tbody tr")


def page_rows(driver, view) -> list[tuple[str, int, str, bool]]:
    """(path, bytes, fate, shown) of every row of the leaf table, in the page's order."""
    return [tuple(r) for r in driver.execute_script(
        "return Array.prototype.map.call(arguments[0].querySelectorAll("
        "'table.leaves tbody tr'), function (r) { return [r.dataset.path, "
        "Number(r.dataset.bytes), r.dataset.fate, !r.hidden]; });", view)]


def drive_leaf_table(driver, view, shots: Path, name: str) -> list[tuple[str, int, str]]:
    """Sort by size both ways, filter by fate and path text, show every match; returns
    the rows in the page's first order. Only the first ``data-limit`` matches are laid
    out until the button asks for every one."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    limit = int(view.get_attribute("data-limit"))
    first = [r[:3] for r in page_rows(driver, view)]

    def check_shown(matching: list[tuple[str, int, str]]) -> None:
        rows = page_rows(driver, view)
        shown = [r[:3] for r in rows if r[3]]
        assert shown == [r for r in (r[:3] for r in rows) if r in matching][:limit]
        assert view.find_element(By.CSS_SELECTOR, ".shown").text == str(len(matching))

    size = view.find_element(By.CSS_SELECTOR, 'th[data-sort="bytes"] button')
    size.click()
    rows = [r[:3] for r in page_rows(driver, view)]
    assert [b for _, b, _ in rows] == sorted((b for _, b, _ in first), reverse=True)
    assert sorted(rows) == sorted(first)
    check_shown(first)
    size.click()
    assert [r[1] for r in page_rows(driver, view)] == sorted(b for _, b, _ in first)
    fate = first[-1][2]
    Select(view.find_element(By.CSS_SELECTOR, ".fate-filter")).select_by_value(fate)
    check_shown([r for r in first if r[2] == fate])
    text = first[-1][0][-12:]
    box = view.find_element(By.CSS_SELECTOR, ".path-filter")
    box.send_keys(text)
    matching = [r for r in first if r[2] == fate and text.lower() in r[0].lower()]
    assert matching
    check_shown(matching)
    driver.execute_script("arguments[0].scrollIntoView()", view)
    shot = shots / f"{name}.png"
    assert driver.save_screenshot(str(shot))
    assert shot.read_bytes().startswith(b"\x89PNG")
    box.clear()
    Select(view.find_element(By.CSS_SELECTOR, ".fate-filter")).select_by_value("")
    check_shown(first)
    more = view.find_element(By.CSS_SELECTOR, "button.more")
    assert more.is_displayed() == (len(first) > limit)
    if len(first) > limit:
        more.click()
        assert all(r[3] for r in page_rows(driver, view))
    return first


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
