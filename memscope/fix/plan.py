"""``memscope fix``: write the advice into the user's source, then measure it again.

The flow: :func:`measure_script` runs the script under ``memscope run`` (a fresh
process, stopping early) and reads its report; :func:`plan_fix` turns each
function's advice into an edit of the jit call that made it (found by the
report's ``jit_site``), refusing, one line each, what it cannot make safely;
:func:`apply` writes every edit or none; :func:`verify` compares a second
capture of the edited program with the advice, and :func:`restore` puts the
files back where the measurement disagrees.

The script runs in its own process each time: a second run inside this one
would reuse the modules (and jit caches) the first run imported.
"""

from __future__ import annotations

import ast
import contextlib
import difflib
import os
import subprocess
import sys
import tempfile
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from memscope.analysis.advice import AdviceLevel
from memscope.compiled.program import WRITTEN_BACK
from memscope.errors import EXIT_PROGRAM_FAILED, MemscopeError
from memscope.fix.edit import Donate, EditRequest, FixRefused, edit_source, parse_setting
from memscope.fix.flow import check_call, positional_parameters
from memscope.program import sites
from memscope.program.runner import Script
from memscope.report import FunctionReport, Report, load_report

#: ``--stop-after`` when none is given: enough for a training loop's first steps
#: (each signature is measured at its first call).
DEFAULT_STOP_AFTER = 10


@dataclass(frozen=True)
class Advised:
    """One function whose advice :func:`plan_fix` writes into its jit call.

    ``leaves`` are the input leaves the advice makes ``aliased``;
    ``peak_predicted`` is the peak memscope measured by compiling the advice.
    """

    name: str
    signature: str
    source: str | None
    jit_site: str
    setting: str
    leaves: tuple[str, ...]
    peak_before: int | None
    peak_predicted: int | None


@dataclass(frozen=True)
class FileChange:
    """One file's text before and after the edits; ``path`` as the report shows it."""

    path: str
    full_path: str
    before: str
    after: str


@dataclass(frozen=True)
class FixPlan:
    """What ``memscope fix`` would change. ``refusals`` and ``notes`` are one line
    each; with any refusal nothing is written. ``diff`` is the unified diff of
    ``changes``."""

    functions: tuple[Advised, ...]
    changes: tuple[FileChange, ...]
    refusals: tuple[str, ...]
    notes: tuple[str, ...]
    diff: str


@dataclass(frozen=True)
class Check:
    """One function measured again after the edit.

    ``peak_after`` is ``None`` where the function was not captured again;
    ``not_aliased`` holds ``(leaf, its fate now)`` for every advised leaf that
    did not end ``aliased`` (fate ``missing`` where the leaf is gone).
    """

    function: Advised
    peak_after: int | None
    aliased: int
    not_aliased: tuple[tuple[str, str], ...]
    error: str | None = None
    #: the report's reason for the first leaf that did not end ``aliased``
    why: str | None = None

    @property
    def as_advised(self) -> bool:
        """The measurement agrees with the advice: every leaf aliased, the peak as predicted."""
        return (self.error is None and not self.not_aliased
                and self.peak_after == self.function.peak_predicted)


# --------------------------------------------------------------- capture --


def measure_script(script: Script, *, stop_after: int, advice: AdviceLevel) -> Report:
    """The report of ``memscope run --stop-after N`` of ``script``, run in a fresh
    process with its output held back (shown only if it fails).

    Raises:
        MemscopeError: the program failed (exit code 3) or wrote no report.
    """
    with tempfile.TemporaryDirectory(prefix="memscope-fix-") as folder:
        out = os.path.join(folder, "report.json")
        command = [sys.executable, "-m", "memscope", "run", "-q", "--advice", advice,
                   "--stop-after", str(stop_after), "-o", out,
                   *(f"--user-package={name}" for name in script.packages),
                   *(["-m"] if script.module else []), script.name, *script.args]
        done = subprocess.run(command, capture_output=True, text=True, env=_env(),
                              check=False)
        report = load_report(out) if os.path.exists(out) else None
    if report is None or report.run is None or report.run.outcome not in ("completed",
                                                                          "stopped"):
        if report is not None and report.run is not None:
            why = report.run.ending
        else:
            lines = (done.stderr or done.stdout).strip().splitlines()
            why = lines[-1] if lines else f"exit code {done.returncode}"
        raise MemscopeError(f"{script.name} failed under memscope run ({why}); nothing "
                            "was changed", exit_code=EXIT_PROGRAM_FAILED)
    return report


def _env() -> dict[str, str]:
    # The child imports this very memscope, wherever it was imported from.
    root = os.path.dirname(sites.OWN_ROOT)
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH")) if p)
    return env


# ------------------------------------------------------------------ plan --


def plan_fix(report: Report, functions: Iterable[str] | None = None) -> FixPlan:
    """The edits that write each function's advice into its jit call.

    ``functions`` limits it to those names. Paths in the report are relative
    to the working directory the capture ran in (this one).

    Raises:
        MemscopeError: a name in ``functions`` that the run did not capture.
    """
    chosen = _chosen(report, functions)
    refusals: list[str] = []
    notes: list[str] = []
    advised: list[Advised] = []
    requests: dict[str, dict[int, EditRequest]] = {}
    for f in chosen:
        try:
            item, path, request = _request(f)
            refusal, note = _flow(f, item)
        except FixRefused as e:
            refusals.append(f"{f.name}: {e}")
            continue
        if note is not None:
            notes.append(f"{f.name}: could not check that the donated arguments are not "
                         f"read after the call: {note}")
        if refusal is not None:
            refusals.append(f"{f.name}: {refusal}")
            continue
        same = requests.setdefault(path, {}).get(request.line)
        if same is not None and same.donate != request.donate:
            refusals.append(f"{f.name}: its signatures are advised different donations "
                            f"({item.jit_site}); edit it by hand")
            continue
        requests[path][request.line] = request
        advised.append(item)
    changes = []
    for path, edits in requests.items():
        try:
            changes.append(_change(path, list(edits.values()), chosen))
        except FixRefused as e:
            refusals.append(str(e))
    changes = [c for c in changes if c.after != c.before]
    refusals.extend(f"{c.path}: it is in an installed package, not edited (reinstalling "
                    "the package would undo it): the diff below is the change to make in "
                    "its source" for c in changes if sites.is_installed(c.full_path))
    return FixPlan(tuple(advised), tuple(changes), tuple(refusals), tuple(notes),
                "".join(_diff(c) for c in changes))


def _chosen(report: Report, functions: Iterable[str] | None) -> list[FunctionReport]:
    with_advice = [f for f in report.functions
                   if f.advice is not None and (f.advice.add or f.advice.drop)
                   and f.advice.worthwhile and f.library is None]
    if functions is None:
        return with_advice
    names = set(functions)
    known = {f.name for f in report.functions}
    for name in sorted(names - known):
        raise MemscopeError(f"--function {name}: the run captured no function of that name "
                            f"(it captured {', '.join(sorted(known)) or 'none'})")
    return [f for f in with_advice if f.name in names]


def _site(text: str) -> tuple[str, int]:
    path, _, line = text.rpartition(":")
    return path, int(line)


def _request(f: FunctionReport) -> tuple[Advised, str, EditRequest]:
    assert f.advice is not None and f.advice.setting is not None  # (_chosen: worthwhile)
    if f.jit_site is None:
        raise FixRefused("memscope did not see which line of your code jitted it")
    path, line = _site(f.jit_site)
    full = os.path.realpath(path)
    donate: Donate = parse_setting(f.advice.setting)
    variant = f.variant("advised")
    aliased = {b.path for b in (variant.inputs if variant else ()) if b.fate == "aliased"}
    leaves = tuple(b.path for b in f.inputs if b.candidate and b.path in aliased)
    item = Advised(name=f.name, signature=f.signature, source=f.source, jit_site=f.jit_site,
                   setting=f.advice.setting, leaves=leaves,
                   peak_before=f.advice.peak_before, peak_predicted=f.advice.peak_after)
    return item, full, EditRequest(line, f.name, donate)


def _flow(f: FunctionReport, item: Advised) -> tuple[str | None, str | None]:
    """``(why the edit is refused, why the check could not be made)``."""
    assert f.advice is not None
    if f.call_site is None:
        return None, "memscope did not see the line that called it"
    path, line = _site(f.call_site)
    text = _read(path)
    if text is None:
        return None, f"{path} cannot be read"
    params = None
    if f.source is not None:
        source_text = _read(_site(f.source)[0])
        params = positional_parameters(source_text, _site(f.source)[1]) if source_text else None
    callees = [f.name, *_assigned(_site(item.jit_site))]
    # An argument the framework writes back into the same objects (nnx.jit: the
    # model's and optimizer's Variables get the new arrays) stays valid after the
    # call: passing it again, or reading it, reads the new state.
    donated = [label for label in f.advice.add if not _written_back(f, label)]
    verdict = check_call(text, line, callees, donated, params, where=f.call_site)
    return verdict.read, verdict.unchecked


def _written_back(f: FunctionReport, label: str) -> bool:
    """Whether every leaf of argument ``label`` is written back into its object
    by the call (an output ``<leaf path> (written back)``)."""
    back = {o.path.removesuffix(WRITTEN_BACK) for o in f.outputs
            if o.path.endswith(WRITTEN_BACK)}
    leaves = [b.path for b in f.inputs
              if b.path == label or b.path.startswith((f"{label}.", f"{label}["))]
    return bool(leaves) and all(path in back for path in leaves)


def _assigned(site: tuple[str, int]) -> list[str]:
    """The names the jit made at ``site`` is assigned to (``step = jax.jit(...)``)."""
    text = _read(site[0])
    try:
        tree = ast.parse(text or "")
    except SyntaxError:
        return []
    return [t.id for node in ast.walk(tree) if isinstance(node, ast.Assign)
            and node.lineno <= site[1] <= (node.end_lineno or node.lineno)
            for t in node.targets if isinstance(t, ast.Name)]


def _read(path: str) -> str | None:
    try:
        with open(path, encoding="utf-8", newline="") as f:  # its own line endings
            return f.read()
    except (OSError, UnicodeDecodeError):
        return None


def _change(path: str, requests: Sequence[EditRequest],
            functions: Sequence[FunctionReport]) -> FileChange:
    shown = os.path.relpath(path) if not os.path.relpath(path).startswith(os.pardir) else path
    digests = {f.jit_file_sha256 for f in functions
               if f.jit_site and os.path.realpath(_site(f.jit_site)[0]) == path}
    if sites.file_sha256(path) not in digests or None in digests:
        raise FixRefused(f"{shown} changed since memscope ran it (or could not be read); "
                         "run memscope fix again")
    before = _read(path)
    if before is None:
        raise FixRefused(f"{shown} cannot be read as UTF-8 text")
    return FileChange(shown, path, before, edit_source(before, requests, path=shown))


def _diff(change: FileChange) -> str:
    return "".join(difflib.unified_diff(
        change.before.splitlines(keepends=True), change.after.splitlines(keepends=True),
        fromfile=f"a/{change.path}", tofile=f"b/{change.path}"))


# ------------------------------------------------------------ write back --


def apply(changes: Sequence[FileChange]) -> None:
    """Write every change, or none: each file is checked unchanged first, and
    those written are put back if a later write fails.

    Raises:
        FixRefused: a file changed since it was read, or cannot be written.
    """
    for change in changes:
        if _read(change.full_path) != change.before:
            raise FixRefused(f"{change.path} changed while memscope fix ran; nothing "
                             "was written")
    done: list[FileChange] = []
    try:
        for change in changes:
            _write(change.full_path, change.after)
            done.append(change)
    except OSError as e:
        restore(done)
        raise FixRefused(f"cannot write {change.path} ({e.strerror}); nothing was "
                         "written") from None


def restore(changes: Sequence[FileChange]) -> None:
    """Put each file's text back as it was before :func:`apply`."""
    for change in changes:
        _write(change.full_path, change.before)


def _write(path: str, text: str) -> None:
    # Beside the file, then renamed over it: a crash never leaves half a file.
    folder = os.path.dirname(path)
    fd, temporary = tempfile.mkstemp(dir=folder, prefix=".memscope-fix-")
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="") as f:
            f.write(text)
        os.chmod(temporary, os.stat(path).st_mode & 0o7777)
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise


# ---------------------------------------------------------------- verify --


def verify(functions: Sequence[Advised], after: Report) -> tuple[Check, ...]:
    """Each fixed function as the edited program's capture measured it."""
    return tuple(_check(item, after) for item in functions)


def _check(item: Advised, after: Report) -> Check:
    def same_file(source: str | None) -> str | None:
        return None if source is None else source.rpartition(":")[0]

    match = next((f for f in after.functions if f.name == item.name
                  and f.signature == item.signature
                  and same_file(f.source) == same_file(item.source)), None)
    if match is None or match.memory is None:
        why = ("the edited program did not call it" if match is None
               else f"its compiled program could not be read ({match.error})")
        return Check(item, None, 0, tuple((leaf, "missing") for leaf in item.leaves),
                     error=why)
    leaves = {b.path: b for b in match.inputs}
    missed = tuple((leaf, leaves[leaf].fate if leaf in leaves else "missing")
                   for leaf in item.leaves
                   if leaf not in leaves or leaves[leaf].fate != "aliased")
    first = leaves.get(missed[0][0]) if missed else None
    return Check(item, match.memory.peak_bytes, len(item.leaves) - len(missed), missed,
                 why=first.reason if first is not None else None)
