"""A real browser for the HTML report: headless Chromium run once (``chromium``),
or driven under Selenium (``driven_chromium``, the ``browser`` fixture in
tests/conftest.py); the tests that need one are skipped, saying why, where it
is not installed (.ci/run installs it with apt-get)."""

from __future__ import annotations

import contextlib
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


def chromium(page: Path, tmp_path: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    """Headless Chromium on ``page`` once, with ``extra`` flags (``--dump-dom``,
    ``--screenshot=...``), a fresh profile in ``tmp_path``."""
    assert CHROMIUM is not None
    return subprocess.run(
        [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
         "--no-first-run", "--disable-background-networking", "--disable-component-update",
         "--disable-sync", "--disable-dev-shm-usage", f"--user-data-dir={tmp_path / 'profile'}",
         "--window-size=1280,2000", *extra, page.as_uri()],
        capture_output=True, text=True, timeout=120, check=False)


needs_chromium = pytest.mark.skipif(
    CHROMIUM is None, reason="chromium is not installed (.ci/run installs it with apt-get; "
    "without apt the browser check cannot run)")


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


@contextlib.contextmanager
def driven_chromium(tmp_path: Path) -> Iterator[Any]:
    """Headless Chromium under Selenium, with a fresh profile and no network use
    (the ``browser`` fixture, tests/conftest.py)."""
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
