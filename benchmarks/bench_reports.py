"""How the rendered report scales with a function's leaf count: lines, time, size,
and the HTML leaf table's sort and filter in headless Chromium.

Builds reports of one training step whose parameters, Adam moments and batch have
N input leaves (and as many outputs), as a model of that many arrays would, then
times memscope's summary and the terminal view, counts the default output's lines,
writes the HTML file, and, where chromium, chromedriver and selenium are
installed, sorts the page's leaf table by size and filters it by fate and path,
timing each in the page with the layout it causes (performance.now()).

Run:  python -m benchmarks.bench_reports [--sizes 1000,5000,20000] [--repeat 3]

A runnable script, not a test: no timing is asserted anywhere.
"""

from __future__ import annotations

import argparse
import io
import shutil
import statistics
import tempfile
import time
from pathlib import Path

from memscope.analysis.advice import annotate
from memscope.render.html import render_html
from memscope.render.terminal import render_report
from memscope.report import (
    Device,
    Environment,
    FunctionReport,
    InputBuffer,
    Memory,
    OutputBuffer,
    Report,
    RunInfo,
)
from memscope.views.summary import summarize


def make_report(leaves: int) -> Report:
    """One step with about ``leaves`` input leaves: params aliased, Adam state not donated."""
    per_tree = max(1, (leaves - 2) // 3)
    params = [(f"['layers'][{i // 4}]['{'wb'[i % 2]}{i % 4 // 2}']", (64 + i % 7, 32))
              for i in range(per_tree)]
    inputs, outputs = [], [OutputBuffer("result[0]", (), "float32", 4, "new")]
    for path, shape in params:
        size = 4 * shape[0] * shape[1]
        inputs.append(InputBuffer(f"params{path}", shape, "float32", size, True, "aliased",
                                  f"result[1]{path}"))
        outputs.append(OutputBuffer(f"result[1]{path}", shape, "float32", size,
                                    "reuses_input", f"params{path}"))
    for moment in ("mu", "nu"):
        for path, shape in params:
            size = 4 * shape[0] * shape[1]
            inputs.append(InputBuffer(f"opt_state[0].{moment}{path}", shape, "float32", size,
                                      False, "not_donated"))
            outputs.append(OutputBuffer(f"result[2][0].{moment}{path}", shape, "float32", size,
                                        "new"))
    inputs += [InputBuffer("batch['x']", (64, 32), "float32", 8192, False, "not_donated"),
               InputBuffer("batch['y']", (64,), "int32", 256, False, "not_donated")]
    fn = FunctionReport(name="train_step", source="train.py:40", calls=10,
                        signature="(" + ", ".join(f"{b.dtype}{list(b.shape)}" for b in inputs) + ")",
                        memory=Memory(argument_bytes=1, output_bytes=1, alias_bytes=1,
                                      temp_bytes=1, peak_bytes=1),
                        inputs=annotate(inputs, outputs, same_size_donors=True),
                        outputs=tuple(outputs))
    return Report("0.1.0", Environment("0.10.2", "0.10.2", "cpu", (Device(0, "cpu", "cpu"),)),
                  RunInfo("train.py", (), "completed", 0), (fn,))


def _median(repeat: int, work) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        work()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def _browser_times(page: Path) -> tuple[float, float, float] | None:
    """Milliseconds in the page for a sort by size, a fate filter and a path filter."""
    chromium, driver_path = shutil.which("chromium"), shutil.which("chromedriver")
    try:
        from selenium import webdriver
        from selenium.webdriver.chrome.options import Options
        from selenium.webdriver.chrome.service import Service
    except ImportError:
        return None
    if chromium is None or driver_path is None:
        return None
    options = Options()
    options.binary_location = chromium
    profile = tempfile.mkdtemp()
    for arg in ("--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                "--disable-background-networking", "--disable-component-update",
                "--disable-sync", "--no-first-run", f"--user-data-dir={profile}"):
        options.add_argument(arg)
    driver = webdriver.Chrome(service=Service(driver_path), options=options)
    try:
        driver.get(page.as_uri())
        return tuple(driver.execute_script("""
            var view = document.querySelector('.leafview');
            // each includes the layout it causes (offsetHeight forces it)
            function timed(f) {
              var t = performance.now(); f(); void document.body.offsetHeight;
              return performance.now() - t; }
            var sort = timed(function () {
              view.querySelector('th[data-sort="bytes"] button').click(); });
            var fate = timed(function () {
              var s = view.querySelector('.fate-filter'); s.value = 'not_donated';
              s.dispatchEvent(new Event('change')); });
            var path = timed(function () {
              var i = view.querySelector('.path-filter'); i.value = "['layers'][1";
              i.dispatchEvent(new Event('input')); });
            return [sort, fate, path];"""))
    finally:
        driver.quit()
        shutil.rmtree(profile, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1000,5000,20000",
                        help="input leaf counts, comma-separated")
    parser.add_argument("--repeat", type=int, default=3, help="the median of this many runs")
    args = parser.parse_args(argv)
    print(f"{'leaves':>7} {'lines':>6} {'summary s':>10} {'terminal s':>11} {'html s':>7} "
          f"{'html MiB':>9} {'sort ms':>8} {'fate ms':>8} {'path ms':>8}")
    with tempfile.TemporaryDirectory() as folder:
        for size in (int(s) for s in args.sizes.split(",")):
            report = make_report(size)
            leaves = len(report.functions[0].inputs)
            out = io.StringIO()
            render_report(report, out, width=80, plain=True)
            lines = len(out.getvalue().splitlines())
            summary_s = _median(args.repeat, lambda r=report: summarize(r))
            terminal_s = _median(args.repeat, lambda r=report: render_report(
                r, io.StringIO(), width=80, plain=True))
            page = Path(folder) / f"report-{size}.html"

            def write(r: Report = report, p: Path = page) -> None:
                with p.open("w", encoding="utf-8") as f:
                    render_html(r, f)
            html_s = _median(args.repeat, write)
            browser = _browser_times(page)
            shown = (" ".join(f"{t:8.1f}" for t in browser) if browser else
                     f"{'n/a':>8} {'n/a':>8} {'n/a':>8}")
            print(f"{leaves:>7} {lines:>6} {summary_s:>10.3f} {terminal_s:>11.3f} "
                  f"{html_s:>7.3f} {page.stat().st_size / 2**20:>9.2f} {shown}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
