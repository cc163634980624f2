"""Does memscope change what a public project's test suite does? Run it both ways and compare.

Runs a project's pytest suite twice, each with the project directory as the working
directory: plainly (``PYTHON -m pytest``) and under memscope (``memscope run -q -m pytest``,
the memscope executable beside PYTHON), each writing a JUnit XML file, timed by wall clock.
Then compares every test's outcome (passed / failed / error / skipped, keyed by
``classname::name``; pytest writes an xfail as skipped) between the two files. memscope
promises never to change the program's behaviour, so every differing test is a bug.

    python -m benchmarks.public_suites --project ../suites/optax --python VENV/bin/python \\
        --name optax -- optax/
    python -m benchmarks.public_suites --project DIR --python PY --json out.json -- tests/ -k jit
    python -m benchmarks.public_suites --show a.json b.json     # the tables of earlier runs

Prints a table per suite (tests, same outcome, differing, time plain, time under memscope,
their ratio), then each differing test with both outcomes and the first lines of the
memscope side's failure message. ``--json`` also writes all of it as JSON. The
comparison itself (:func:`parse_junit`, :func:`compare`) is pure; tests/test_public_suites.py
checks it on hand-written XML.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from dataclasses import asdict, dataclass, field
from pathlib import Path

import pandas as pd

from benchmarks._cache import first_run_env

OUTCOMES = ("passed", "failed", "error", "skipped")
MISSING = "missing"  # the test is in one file only (e.g. a collection error on the other side)
MESSAGE_LINES = 4


@dataclass(frozen=True)
class Outcome:
    """One test's outcome in a JUnit file, with the failure's message and details if any."""

    outcome: str
    message: str = ""
    details: str = ""


@dataclass(frozen=True)
class Difference:
    """A test whose outcome differs between the plain run and the run under memscope."""

    test: str
    plain: str
    memscope: str
    message: str  # the memscope side's message (empty when it passed or is missing)
    details: str


@dataclass
class Side:
    """One run of the suite: its command, exit code and wall time."""

    command: list[str]
    returncode: int | None
    seconds: float
    junit: str
    tests: int = 0


@dataclass
class SuiteResult:
    name: str
    project: str
    pytest_args: list[str]
    plain: Side
    memscope: Side
    tests: int
    same: int
    differences: list[Difference] = field(default_factory=list)


def parse_junit(text: str) -> dict[str, Outcome]:
    """Every test case in a pytest JUnit XML document, keyed ``classname::name``.

    A case with a <failure> is failed (even if its teardown also errored), else one with an
    <error> is error, else one with <skipped> is skipped, else passed. A key seen twice gets
    ``#2``, ``#3``... appended so that no outcome is lost.
    """
    root = ET.fromstring(text)
    outcomes: dict[str, Outcome] = {}
    for case in root.iter("testcase"):
        key = f"{case.get('classname', '')}::{case.get('name', '')}"
        if key in outcomes:
            n = 2
            while f"{key}#{n}" in outcomes:
                n += 1
            key = f"{key}#{n}"
        outcomes[key] = _case_outcome(case)
    return outcomes


def _case_outcome(case: ET.Element) -> Outcome:
    for tag, outcome in (("failure", "failed"), ("error", "error"), ("skipped", "skipped")):
        child = case.find(tag)
        if child is not None:
            return Outcome(outcome, child.get("message", "") or "", (child.text or "").strip())
    return Outcome("passed")


def compare(plain: dict[str, Outcome], memscope: dict[str, Outcome]) -> list[Difference]:
    """The tests whose outcome differs, in the plain file's order then the memscope file's.

    A test present on one side only differs too, its other outcome ``missing``.
    """
    differences = []
    for test in [*plain, *(key for key in memscope if key not in plain)]:
        before = plain.get(test)
        after = memscope.get(test)
        before_outcome = before.outcome if before else MISSING
        after_outcome = after.outcome if after else MISSING
        if before_outcome != after_outcome:
            differences.append(Difference(
                test, before_outcome, after_outcome,
                after.message if after else "", after.details if after else ""))
    return differences


def first_lines(difference: Difference, count: int = MESSAGE_LINES) -> list[str]:
    """The first lines of the memscope side's message, or of its details if it has none;
    when the details hold a traceback, its last ``E`` line (the exception) too."""
    lines = [line for line in difference.message.splitlines() if line.strip()][:count]
    if not lines:
        lines = [line for line in difference.details.splitlines() if line.strip()][:count]
    errors = [line for line in difference.details.splitlines() if line.startswith("E ")]
    if errors and errors[-1] not in lines:
        lines.append(errors[-1])
    return lines


def node_id(test: str, project: Path) -> str:
    """The pytest node id of a ``classname::name`` key, found by the longest dotted prefix of
    the class name that is a .py file under ``project`` (the key itself if none is)."""
    classname, _, name = test.partition("::")
    name = name.split("#")[0]
    parts = classname.split(".")
    for cut in range(len(parts), 0, -1):
        path = Path(*parts[:cut]).with_suffix(".py")
        if (project / path).is_file():
            return "::".join([path.as_posix(), *parts[cut:], name])
    return test


def _run(command: list[str], cwd: Path, timeout: float | None) -> tuple[int | None, float]:
    start = time.perf_counter()
    try:
        done = subprocess.run(command, cwd=cwd, timeout=timeout, env=first_run_env())
        code: int | None = done.returncode
    except subprocess.TimeoutExpired:
        code = None
    return code, time.perf_counter() - start


def _read(path: Path) -> dict[str, Outcome]:
    return parse_junit(path.read_text()) if path.exists() else {}


def run_suite(name: str, project: Path, python: Path, pytest_args: list[str], out_dir: Path,
              *, reuse: bool = False, timeout: float | None = None) -> SuiteResult:
    """Run the suite plainly and under memscope (or, with ``reuse``, read the earlier XML
    files in ``out_dir``) and compare the outcomes."""
    out_dir = out_dir.resolve()
    out_dir.mkdir(parents=True, exist_ok=True)
    plain_xml = out_dir / "plain.xml"
    memscope_xml = out_dir / "memscope.xml"
    memscope_exe = python.parent / "memscope"
    common = ["-p", "no:cacheprovider", *pytest_args]
    plain_cmd = [str(python), "-m", "pytest", f"--junitxml={plain_xml}", *common]
    memscope_cmd = [str(memscope_exe), "run", "-q", "-o", str(out_dir / "memscope-report.json"),
                    "-m", "pytest", f"--junitxml={memscope_xml}", *common]
    timings_file = out_dir / "timings.json"
    if reuse:
        if not timings_file.exists():
            raise SystemExit(f"--reuse: no earlier run in {out_dir} ({timings_file.name} missing)")
        timings = json.loads(timings_file.read_text())
    else:
        timings = {}
        for side, command, xml in (("plain", plain_cmd, plain_xml),
                                   ("memscope", memscope_cmd, memscope_xml)):
            xml.unlink(missing_ok=True)
            print(f"[{name}] {side}: {' '.join(command)}", file=sys.stderr, flush=True)
            code, seconds = _run(command, project, timeout)
            timings[side] = {"returncode": code, "seconds": seconds}
            print(f"[{name}] {side}: exit {code} in {seconds:.1f} s", file=sys.stderr, flush=True)
        timings_file.write_text(json.dumps(timings))
    plain = _read(plain_xml)
    under = _read(memscope_xml)
    differences = compare(plain, under)
    tests = len(set(plain) | set(under))
    return SuiteResult(
        name, str(project), pytest_args,
        Side(plain_cmd, timings["plain"]["returncode"], timings["plain"]["seconds"],
             str(plain_xml), len(plain)),
        Side(memscope_cmd, timings["memscope"]["returncode"], timings["memscope"]["seconds"],
             str(memscope_xml), len(under)),
        tests, tests - len(differences), differences)


def table(results: list[SuiteResult]) -> pd.DataFrame:
    rows = [{
        "suite": r.name,
        "tests": r.tests,
        "same outcome": r.same,
        "differing": len(r.differences),
        "time plain s": round(r.plain.seconds, 1),
        "time memscope s": round(r.memscope.seconds, 1),
        "ratio": round(r.memscope.seconds / r.plain.seconds, 2) if r.plain.seconds else None,
        "exit plain/memscope": f"{r.plain.returncode}/{r.memscope.returncode}",
    } for r in results]
    return pd.DataFrame(rows).set_index("suite")


def render(results: list[SuiteResult]) -> str:
    out = [table(results).to_string(), ""]
    for r in results:
        by_change: dict[tuple[str, str], int] = {}
        for d in r.differences:
            by_change[(d.plain, d.memscope)] = by_change.get((d.plain, d.memscope), 0) + 1
        if not r.differences:
            out.append(f"{r.name}: every test has the same outcome.")
            continue
        summary = ", ".join(f"{n} {a} -> {b}" for (a, b), n in sorted(by_change.items()))
        out.append(f"{r.name}: {len(r.differences)} differing ({summary})")
        for d in r.differences:
            out.append(f"  {d.test}: plain {d.plain}, memscope {d.memscope}")
            out.extend(f"      {line[:200]}" for line in first_lines(d))
        out.append("")
    return "\n".join(out)


def to_json(results: list[SuiteResult]) -> dict[str, object]:
    return {"suites": [asdict(r) for r in results]}


def from_json(data: dict[str, object]) -> list[SuiteResult]:
    results = []
    for s in data["suites"]:  # type: ignore[attr-defined]
        results.append(SuiteResult(
            s["name"], s["project"], s["pytest_args"], Side(**s["plain"]), Side(**s["memscope"]),
            s["tests"], s["same"], [Difference(**d) for d in s["differences"]]))
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--project", type=Path, help="the project directory (the cwd of both runs)")
    parser.add_argument("--python", type=Path, default=Path(sys.executable),
                        help="the python to run pytest with; memscope is the one beside it")
    parser.add_argument("--name", help="the suite's name in the table (default: the directory's)")
    parser.add_argument("--out-dir", type=Path,
                        help="where the XML files and the report go (default: results/NAME)")
    parser.add_argument("--reuse", action="store_true",
                        help="compare the XML files of an earlier run in --out-dir, run nothing")
    parser.add_argument("--timeout", type=float, help="seconds allowed to each run")
    parser.add_argument("--json", type=Path, help="also write the results as JSON here")
    parser.add_argument("--show", type=Path, nargs="+", metavar="JSON",
                        help="print the tables of earlier --json files, run nothing")
    parser.add_argument("--rerun-differing", type=Path, metavar="JSON",
                        help="run only the differing tests of an earlier --json file (its "
                        "first suite), by node id, before any further pytest arguments")
    parser.add_argument("pytest_args", nargs=argparse.REMAINDER,
                        help="after --: the pytest arguments (test paths, -k ...)")
    args = parser.parse_args(argv)
    if args.show:
        results = [r for path in args.show for r in from_json(json.loads(path.read_text()))]
    else:
        if args.project is None:
            parser.error("--project is required unless --show is given")
        pytest_args = args.pytest_args[1:] if args.pytest_args[:1] == ["--"] else args.pytest_args
        project = args.project.resolve()
        if args.rerun_differing:
            earlier = from_json(json.loads(args.rerun_differing.read_text()))[0]
            pytest_args = [*sorted({node_id(d.test, project) for d in earlier.differences}),
                           *pytest_args]
        name = args.name or project.name
        out_dir = args.out_dir or Path("results") / name
        results = [run_suite(name, project, args.python.absolute(), pytest_args, out_dir,
                             reuse=args.reuse, timeout=args.timeout)]
    print(render(results))
    if args.json:
        args.json.write_text(json.dumps(to_json(results), indent=1))
    return 1 if any(r.differences for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
