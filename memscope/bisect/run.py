"""A bisect from end to end: the releases, an environment and a run for each
release the search tries, the moves explained by the two reports on either
side, and the XLA pass that made each (where disabling one brings it back).

Records only: :mod:`memscope.render.bisect` prints them, and writes them as
JSON for ``-o``.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from memscope import _versions
from memscope.bisect import environments, packages, releases
from memscope.bisect.environments import NotInstalled, ReleaseEnvironment
from memscope.bisect.search import (
    DEFAULT_MIN_CHANGE,
    MEMORY_FIGURES,
    Move,
    Search,
    Tried,
    moved,
    search_releases,
)
from memscope.check.compare import FunctionDiff, compare_reports
from memscope.errors import MemscopeError
from memscope.program.runner import Script
from memscope.progress import SILENT, ProgressStep, Reporter
from memscope.report import FunctionReport, Report, load_report

#: the packages whose releases change what XLA compiles: a move there is asked
#: of XLA's passes
_COMPILERS = ("jax", "libtpu")
#: the most times the passes' run is started again after a pass whose absence
#: crashed XLA
_PASS_RESTARTS = 4


@dataclass(frozen=True)
class Request:
    script: Script
    #: what is bisected: ``jax`` (with ``jaxlib`` at the same version), or a
    #: framework with the user's JAX fixed
    package: str
    range: releases.Range
    function: str | None = None
    target_spec: str | None = None
    min_change: float = DEFAULT_MIN_CHANGE
    passes: bool = True


@dataclass
class PassFinding:
    """Which XLA pass, disabled in the newer release, brings the figures back
    exactly (byte for byte, all five): ``passes`` (none: it cannot be told;
    ``near`` those that bring them only within the threshold, which a pass
    that changes much can do by chance), how many were ``tried`` of the
    ``candidates`` (the passes that changed the function's program there),
    those whose absence crashed XLA or failed its compile."""

    passes: list[str] = field(default_factory=list)
    #: passes whose absence brings the figures within the threshold of the
    #: older release's, not to them: (pass, its figures)
    near: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    tried: int = 0
    candidates: int = 0
    crashed: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)
    note: str | None = None


@dataclass
class Explained:
    """A move, with the diff of the two reports on either side of it."""

    move: Move
    name: str
    source: str | None
    diff: FunctionDiff | None
    passes: PassFinding | None = None
    #: the temporaries XLA allocates per source line (their sizes added over
    #: the call, whatever their lifetimes) whose sums changed: (line, bytes
    #: before, bytes after, ops), largest change first
    temporaries: list[tuple[str | None, int, int, tuple[str, ...]]] = field(
        default_factory=list)


@dataclass
class Result:
    request: Request
    releases: list[str]
    found: Search
    explained: list[Explained]
    environments_built: int
    environments_reused: int
    seconds: float
    user_jax: str | None
    #: the folder the runs' reports and logs are in
    work: str
    #: releases in the range left out: memscope does not run on them
    unsupported: list[str] = field(default_factory=list)
    #: Ctrl-C ended the bisect: what was tried before is all there is
    interrupted: bool = False

    @property
    def tried(self) -> list[Tried]:
        return self.found.order


def report_function_key(fn: FunctionReport, seen: dict[str, int]) -> str:
    """One function of a report, the same in every release's: its name and
    source line, and which of its signatures (``#2``) where it has several."""
    base = f"{fn.name} ({fn.source})" if fn.source else fn.name
    seen[base] = seen.get(base, 0) + 1
    return base if seen[base] == 1 else f"{base} #{seen[base]}"


def report_figures(report: Report) -> dict[str, dict[str, Any]]:
    seen: dict[str, int] = {}
    out = {}
    for fn in report.functions:
        if fn.memory is None:
            continue
        figures: dict[str, Any] = {f: getattr(fn.memory, f, None) for f in MEMORY_FIGURES}
        figures["peak_rule"] = getattr(fn.memory, "peak_rule", None)
        out[report_function_key(fn, seen)] = figures
    return out


def _label(package: str, release: str) -> str:
    return f"{'JAX' if package == 'jax' else package} {release}"


class Runner:
    """Tries releases for :func:`~memscope.bisect.search.search`: the
    environment (built or found), the program run there, its report read."""

    def __init__(self, request: Request, work: Path, progress: Reporter,
                 expected: int) -> None:
        self.request = request
        self.work = work
        self.progress = progress
        self.expected = expected
        self.carried = packages.carried(request.script.name, request.script.module,
                                        () if request.package == "jax" else (request.package,))
        if request.package != "jax":
            self.carried = packages.Carried(
                {n: v for n, v in self.carried.versions.items() if n != request.package},
                self.carried.need_jax - {request.package})
        self.jaxlib_versions: list[str] = []
        self.environments: dict[str, ReleaseEnvironment] = {}
        self.built = 0
        self.reused = 0
        self.tried_so_far: list[str] = []
        #: memscope's package as this bisect began, copied: an edit of an
        #: editable installation during a bisect does not change its runs
        self.snapshot = work / "memscope-code"
        shutil.copytree(Path(__file__).resolve().parent.parent, self.snapshot / "memscope",
                        ignore=shutil.ignore_patterns("__pycache__"), dirs_exist_ok=True)

    def pins(self, release: str) -> list[tuple[str, str]]:
        if self.request.package == "jax":
            jaxlib = releases.companion(release, self.jaxlib_versions) or release
            return [("jax", release), ("jaxlib", jaxlib)]
        fixed = [(n, v) for n in ("jax", "jaxlib") if (v := _versions.installed(n))]
        return [(self.request.package, release), *fixed]

    def say(self, release: str, what: str) -> None:
        """``what`` is being done for ``release``, with the releases tried so far
        of about how many."""
        done = len(self.tried_so_far)
        self.progress(ProgressStep(f"{_label(self.request.package, release)}: {what}", done,
                           max(self.expected, done + 1), about=True))

    def environment(self, release: str) -> ReleaseEnvironment:
        env = environments.ensure(self.pins(release), self.carried,
                                  progress=lambda line: self.say(release, line))
        self.environments[release] = env
        if env.reused:
            self.reused += 1
        else:
            self.built += 1
        return env

    def child(self, env: ReleaseEnvironment, request: dict[str, Any], name: str) -> tuple[int, str]:
        """Run the child in ``env``; its exit code and the last line of its output."""
        spec = self.work / f"{name}.request.json"
        spec.write_text(json.dumps(request))
        log = self.work / f"{name}.log"
        child_env = dict(os.environ)
        # this bisect's copy of memscope first: the same code in every release's run
        child_env["PYTHONPATH"] = os.pathsep.join(
            [str(self.snapshot), *filter(None, [child_env.get("PYTHONPATH")])])
        child_env["VIRTUAL_ENV"] = str(env.path)
        child_env["PATH"] = f"{env.path / 'bin'}{os.pathsep}{child_env.get('PATH', '')}"
        with open(log, "w") as out:
            done = subprocess.run([env.executable, "-m", "memscope.bisect.child", str(spec)],
                                  stdout=out, stderr=subprocess.STDOUT, env=child_env,
                                  check=False)
        lines = [ln for ln in log.read_text(errors="replace").splitlines() if ln.strip()]
        return done.returncode, (lines[-1].strip() if lines else "")

    def base_request(self) -> dict[str, Any]:
        s = self.request.script
        return {"program": s.name, "args": list(s.args), "module": s.module,
                "user_packages": list(s.packages), "function": self.request.function,
                "target_spec": self.request.target_spec}

    def attempt(self, release: str) -> Tried:
        try:
            env = self.environment(release)
        except NotInstalled as e:
            self.say(release, str(e))
            return Tried(release, "not_installed", error=str(e))
        self.say(release, "running the program under memscope")
        self.tried_so_far.append(release)
        report_path = self.work / f"{release}.report.json"
        report_path.unlink(missing_ok=True)
        code, last = self.child(env, {**self.base_request(), "kind": "try",
                                      "report": str(report_path)}, release)
        extra: dict[str, object] = {"report": str(report_path), "log": str(self.work / f"{release}.log"),
                                    "python": env.python_version, "reused": env.reused,
                                    "changed": env.changed, "installed": {
                                        n: env.installed.get(n) for n, _ in self.pins(release)}}
        if not report_path.is_file():
            return Tried(release, "failed", error=last or f"memscope exited with {code}",
                         extra=extra)
        report = load_report(str(report_path))
        figures = report_figures(report)
        wanted = self.request.function
        if wanted is not None:
            figures = {k: v for k, v in figures.items() if k.split(" (")[0] == wanted}
        if not figures:
            error = (report.run.error if report.run is not None and report.run.error
                     else (f"{wanted} was not called" if wanted else
                           "the program called no jitted function"))
            return Tried(release, "failed", error=error, extra=extra)
        return Tried(release, "ran", figures, extra=extra)

    def passes(self, move: Move, name: str) -> PassFinding:
        """Disable each pass that changed ``name``'s program in the newer release,
        one at a time, and keep those that bring its figures back."""
        env = self.environments[move.release]
        out = self.work / f"{move.release}.{name}.passes.jsonl"
        out.unlink(missing_ok=True)
        finding = PassFinding()
        request = {**self.base_request(), "kind": "passes", "function": name,
                   "out": str(out), "discover": True, "passes": "discovered"}
        self.progress(ProgressStep(f"{_label(self.request.package, move.release)}: reading which XLA "
                           f"passes changed {name}'s program, and compiling it with each "
                           "disabled in turn", 0))
        self.child(env, request, f"{move.release}.passes")
        records = _records(out)
        listed = next((r for r in records if "discovered" in r), None)
        if listed is None:
            finding.note = "XLA's passes could not be listed: " + next(
                (r["error"] for r in records if "error" in r), "its dump could not be read")
            return finding
        if any(moved(move.after.get(f), listed["memory"].get(f), self.request.min_change)
               for f in MEMORY_FIGURES):
            # compiled again from the call in shapes, it is not the program that ran
            finding.note = (f"{name} compiled again on {move.release} (with XLA's dump) does "
                            "not give its run's figures, so no pass can be compared")
            return finding
        discovered = listed["discovered"]
        finding.candidates = len(discovered)
        left = list(discovered)
        start = records.index(listed) + 1
        for restart in range(_PASS_RESTARTS + 1):
            if not left:
                break
            if restart:
                self.progress(ProgressStep(f"{_label(self.request.package, move.release)}: XLA "
                                   f"crashed without {finding.crashed[-1]}; compiling {name} "
                                   f"again with each of the {len(left)} passes left disabled "
                                   "in turn", 0))
                start = len(_records(out))
                self.child(env, {**request, "discover": False, "passes": left},
                           f"{move.release}.passes")
            new = _records(out)[start:]
            ended = {r["pass"] for r in new if "pass" in r}
            started = [r["started"] for r in new if "started" in r]
            crashed = [p for p in started if p not in ended]
            finding.crashed += crashed
            for r in new:
                if "pass" not in r:
                    continue
                finding.tried += 1
                if "error" in r:
                    finding.failed.append(r["pass"])
                elif all(move.before.get(f) == r["memory"].get(f) for f in MEMORY_FIGURES):
                    finding.passes.append(r["pass"])
                elif all(not moved(move.before.get(f), r["memory"].get(f),
                                   self.request.min_change) for f in MEMORY_FIGURES):
                    finding.near.append((r["pass"], r["memory"]))
            done = ended | set(crashed)
            left = [p for p in left if p not in done]
            if not crashed:
                break
        return finding


def _records(path: Path) -> list[dict[str, Any]]:
    if not path.is_file():
        return []
    out = []
    for line in path.read_text().splitlines():
        try:
            out.append(json.loads(line))
        except ValueError:
            continue
    return out


def _explain(move: Move, tried: dict[str, Tried]) -> Explained:
    """The move with the diff of the function's two reports, and its
    temporaries per source line before and after."""
    name = move.function.split(" (")[0]
    source = move.function.split(" (", 1)[1].rstrip(")").split(")")[0] if " (" in move.function else None
    found = Explained(move, name, source, None)
    try:
        before = load_report(str(tried[move.previous].extra["report"]))
        after = load_report(str(tried[move.release].extra["report"]))
    except (KeyError, MemscopeError, OSError):
        return found
    for d in compare_reports(before, after):
        if d.name == name and (source is None or d.source == source):
            found.diff = dataclasses.replace(d, before_setting=None, after_setting=None,
                                             problems=(), notes=())
            break
    then, now = (next((f for f in r.functions if f.name == name
                       and (source is None or f.source == source)), None)
                 for r in (before, after))
    if then is not None and now is not None:
        found.temporaries = _temporaries_moved(then, now)
    return found


def _temporaries_moved(then: FunctionReport, now: FunctionReport
                       ) -> list[tuple[str | None, int, int, tuple[str, ...]]]:
    """The source lines whose temporaries' sizes, added, differ between the two
    (``buffers.by_source``; a line absent from a list kept whole is 0 there,
    one absent from a list cut at its largest entries is left out)."""
    if then.buffers is None or now.buffers is None:
        return []
    whole = [len(b.by_source) < 50 for b in (then.buffers, now.buffers)]
    old = {line.source: line for line in then.buffers.by_source}
    new = {line.source: line for line in now.buffers.by_source}
    out = []
    for key in [*new, *[k for k in old if k not in new]]:
        if (key not in old and not whole[0]) or (key not in new and not whole[1]):
            continue
        a, b = old.get(key), new.get(key)
        x, y = (a.bytes if a else 0), (b.bytes if b else 0)
        named = b if b is not None else a
        if x != y and named is not None:
            out.append((key, x, y, named.ops))
    return sorted(out, key=lambda t: -abs(t[2] - t[1]))


def run_bisect(request: Request, *, progress: Reporter = SILENT,
           work: Path | None = None) -> Result:
    """Bisect ``request.package``'s releases in ``request.range`` for the program;
    ``progress`` is told what is being done (reading the index, building each
    release's environment, running the program there, the pass search), with
    the releases tried of about how many.

    Raises:
        MemscopeError: the index has no release in the range, or uv is missing.
    """
    start = time.monotonic()
    environments.uv()  # before anything: a missing uv is one line
    progress(ProgressStep(f"reading the releases of {request.package} in {request.range} from the "
                  "package index", 0))
    listed = releases.index_versions(request.package)
    chosen = request.range.select(listed)
    if not chosen:
        raise MemscopeError(f"the package index has no release of {request.package} in "
                            f"{request.range} (its releases: {', '.join(listed[-8:])}, ...)")
    unsupported: list[str] = []
    if request.package == "jax":
        unsupported = [r for r in chosen if _versions.support_problem(r, r) is not None]
        chosen = [r for r in chosen if r not in unsupported]
        if unsupported:
            progress(ProgressStep(f"left out JAX {', '.join(unsupported)}: memscope runs on JAX "
                          f"{_versions.SUPPORTED_SERIES[0][0]}."
                          f"{_versions.SUPPORTED_SERIES[0][1]} and later", 0))
        if not chosen:
            raise MemscopeError(f"memscope runs on JAX 0.7 and later: no release in "
                                f"{request.range} to bisect")
    folder = Path(work) if work is not None else Path(tempfile.mkdtemp(prefix="memscope-bisect-"))
    folder.mkdir(parents=True, exist_ok=True)
    expected = min(len(chosen), 2 + math.ceil(math.log2(max(len(chosen) - 1, 1))))
    runner = Runner(request, folder, progress, expected)
    if request.package == "jax":
        runner.jaxlib_versions = releases.index_versions("jaxlib")
    found = Search(list(chosen))
    explained: list[Explained] = []
    interrupted = False
    try:
        search_releases(chosen, runner.attempt, min_change=request.min_change, into=found)
        for move in found.moves:
            item = _explain(move, found.tried)
            explained.append(item)
            if (request.passes and request.package in _COMPILERS and not move.untried
                    and move.before and move.after):
                item.passes = runner.passes(move, item.name)
    except KeyboardInterrupt:
        interrupted = True
    finally:  # the runs' reports and logs stay; memscope's copy (2 MB a bisect) goes
        shutil.rmtree(runner.snapshot, ignore_errors=True)
    return Result(request, chosen, found, explained, runner.built, runner.reused,
                  time.monotonic() - start, _versions.installed("jax"), str(folder),
                  unsupported, interrupted)
