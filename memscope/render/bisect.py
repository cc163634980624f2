"""The terminal view of ``memscope bisect``: the answer first (which release
moved which function's figures, and the XLA pass), each move explained as
``memscope diff`` explains two reports, then every release tried."""

from __future__ import annotations

import json
from typing import IO, Any

from rich.table import Table

from memscope.bisect.run import Explained, Result
from memscope.bisect.search import Tried, moved
from memscope.render.console import Lines, make_console
from memscope.render.diff import render_diff
from memscope.render.text import visible
from memscope.report.units import format_bytes, format_change
from memscope.views.roles_text import package_path

_NAMES = {"peak_bytes": "peak", "temp_bytes": "temporaries", "argument_bytes": "arguments",
          "output_bytes": "outputs", "alias_bytes": "aliased"}
_ORDER = ("peak_bytes", "temp_bytes", "argument_bytes", "output_bytes", "alias_bytes")


def label(package: str, release: str) -> str:
    return f"{'JAX' if package == 'jax' else package} {release}"


def answer(e: Explained, package: str, min_change: float) -> str:
    """``train_step's peak moved between JAX 0.10.1 and 0.10.2: peak +5.0 MiB
    (+7.2%), temporaries +5.0 MiB (+8.9%)``."""
    m = e.move
    parts = []
    for f in _ORDER:
        b, a = m.before.get(f), m.after.get(f)
        if moved(b, a, min_change):
            if b is None or a is None:
                parts.append(f"{_NAMES[f]} {format_bytes(b)} -> {format_bytes(a)}")
            else:
                pct = 100.0 * (a - b) / b if b else None
                parts.append(f"{_NAMES[f]} {format_change(a - b, pct)}")
    what = "peak" if moved(m.before.get("peak_bytes"), m.after.get("peak_bytes"), min_change) \
        else "figures"
    if not m.before or not m.after:
        what = "function"
        parts = ["compiled on one side only" if m.before or m.after else "not compiled"]
    between = f"between {label(package, m.previous)} and {m.release}"
    if m.untried:
        between += f" (not tried between them: {', '.join(m.untried)})"
    return f"{e.name}'s {what} moved {between}: {'; '.join(parts) or 'within the threshold'}"


def pass_line(e: Explained, package: str) -> str | None:
    p = e.passes
    if p is None:
        return None
    newer = label(package, e.move.release)
    compiled = p.tried - len(p.failed)
    tried = (f"the {p.candidates} passes that changed its program there disabled in turn: "
             f"{compiled} compiled")
    if p.failed:
        tried += f", {len(p.failed)} failed to compile"
    if p.crashed:
        tried += f", {len(p.crashed)} crashed XLA"
    untried = p.candidates - p.tried - len(p.crashed)
    if untried > 0:
        tried += f", {untried} not tried"
    if p.passes:
        names = ", ".join(p.passes)
        return (f"XLA pass: with {names} disabled, {e.name} compiled on {newer} has "
                f"{e.move.previous}'s figures again, byte for byte ({tried})")
    if p.note:
        return f"XLA pass: cannot be told: {p.note}"
    near = ""
    if p.near:
        before = e.move.before
        near = "; within the threshold but not exactly, with " + ", ".join(
            f"{name} disabled (temporaries {figures.get('temp_bytes'):,} B against "
            f"{before.get('temp_bytes'):,} B, peak {figures.get('peak_bytes'):,} B against "
            f"{before.get('peak_bytes'):,} B)" for name, figures in p.near[:3])
    return (f"XLA pass: cannot be told: with none of the passes that changed {e.name}'s "
            f"program on {newer} disabled do its figures come back to {e.move.previous}'s "
            f"({tried}){near}")


def _tried_table(result: Result, lines: Lines) -> Table:
    """Every release tried as a column (few, short names), each function's peak
    and temporaries as rows: legible however many functions moved."""
    table = Table(box=lines.box)
    package = result.request.package
    tried = result.tried
    table.add_column(label(package, "").strip(), no_wrap=True)
    for t in tried:
        table.add_column(t.release, justify="right", no_wrap=True)
    table.add_row("python", *[str(t.extra.get("python") or "-") for t in tried])
    table.add_row("environment", *[_env_text(t) for t in tried])
    functions: list[str] = []
    for t in tried:
        functions += [k for k in t.functions if k not in functions]
    single = len({k.split(" (")[0] for k in functions}) == len(functions)
    moves = {(e.move.release, e.move.function) for e in result.explained}
    for k in functions:
        short = k.split(" (")[0] if single else k
        for figure, name in (("peak_bytes", f"{short} peak"), ("temp_bytes", "  temporaries")):
            row = [name]
            for t in tried:
                f = t.functions.get(k)
                if f is None:
                    row.append(_status_text(t) if figure == "peak_bytes" else "")
                    continue
                mark = " *" if figure == "peak_bytes" and (t.release, k) in moves else ""
                row.append(format_bytes(f.get(figure)) + mark)
            table.add_row(*row)
    return table


def _unexplained(e: Explained) -> str | None:
    """Where the parts of the schedule's peak move by less than memscope's peak:
    the rest is how XLA packs the temporaries into its one block."""
    d = e.diff
    b, a = e.move.before.get("peak_bytes"), e.move.after.get("peak_bytes")
    if d is None or d.peak_before is None or d.peak_after is None or b is None or a is None:
        return None
    live, peak = d.peak_after - d.peak_before, a - b
    if abs(peak - live) <= max(1024, 0.1 * abs(peak)):
        return None
    text = (f"note: the buffers live at the schedule's peak moved by {format_change(live)} of "
            f"the peak's {format_change(peak)}: the rest is in the temporary block, which XLA "
            "allocates whole for the call and sizes by how it packs every temporary, not by "
            "what is live at one step (docs/report-format.md, live_at_peak)")
    if e.temporaries:
        text += ("; the temporaries it packs, by source line (sizes added over the call), "
                 "that changed: " + "; ".join(
                     f"{format_change(b - a)} {package_path(where) or 'no source line'} "
                     f"{'/'.join(ops[:2])} ({format_bytes(a)} -> {format_bytes(b)})"
                     for where, a, b, ops in e.temporaries[:4]))
    rest = peak - live
    sizes = sum(b - a for _, a, b, _ in e.temporaries)
    if abs(sizes) < abs(rest) / 2:
        text += (f"; their sizes changed by {format_change(sizes)} in all: the block moved by "
                 "how XLA packs the temporaries (their order and lifetimes), not by what they are")
    return text


def _env_text(t: Tried) -> str:
    if t.status == "not_installed":
        return "none"
    return "reused" if t.extra.get("reused") else "built"


def _status_text(t: Tried) -> str:
    return {"ran": "not called", "not_installed": "-", "failed": "failed"}[t.status]


def render_bisect(result: Result, file: IO[str], *, width: int | None = None,
                  plain: bool | None = None) -> None:
    lines = Lines(make_console(file, width=width, plain=plain))
    req = result.request
    package = req.package
    found = result.found
    ran = [t for t in result.tried if t.status == "ran"]
    if not ran:
        why = found.failing.error if found.failing is not None else None
        bad = [t for t in result.tried if t.error]
        if why is None and bad:
            why = bad[-1].error
        lines.para(visible(f"memscope bisect: no release of {package} in {req.range} ran the "
                           f"program: {why or 'none could be installed'}"), "  ", "", style="bold")
    elif len(ran) == 1:
        lines.para(visible(f"Only {label(package, ran[0].release)} ran the program: nothing to "
                           "compare its figures with"), "  ", "", style="bold")
    elif not result.explained:
        ends = f"{ran[0].release} and {ran[-1].release}"
        lines.para(visible(f"No function's figures moved between {label(package, ends)} (by more "
                           f"than {req.min_change:.1%}; a move and its reversal between two "
                           "releases compared would not show)"), "  ", "", style="bold")
    for e in result.explained:
        lines.para(visible(answer(e, package, req.min_change)), "  ", "", style="bold")
        line = pass_line(e, package)
        if line:
            lines.para(visible(line), "    ", "  ")
    for t, which in ((found.failing, "older"), (found.failing_newer, "newer")):
        if t is not None and found.runs_on is not None:
            lines.para(visible(
                f"range narrowed to {found.runs_on[0]}..{found.runs_on[1]}: the program fails "
                f"on {label(package, t.release)} and the {which} releases tried "
                f"({t.error or 'no error line'})"), "  ", "", style="yellow")
    if result.interrupted:
        lines.para("Interrupted: only what was tried before is below.", "  ", "",
                   style="yellow")
    if result.unsupported:
        lines.para(visible(f"left out {label(package, ', '.join(result.unsupported))}: memscope "
                           "runs on JAX 0.7 and later"), "  ", "", style="yellow")
    for t in result.tried:
        if t.status == "not_installed":
            lines.para(visible(f"skipped {label(package, t.release)}: {t.error}"), "  ", "",
                       style="yellow")
    changed: dict[tuple[str, str], list[str]] = {}
    for t in ran:
        for n, y, h in t.extra.get("changed", ()):  # type: ignore[attr-defined]
            changed.setdefault((n, y), []).append(f"{h or 'not installed'} with {t.release}")
    if changed:
        text = "; ".join(f"{n} {y}: {', '.join(where)}" for (n, y), where in sorted(changed.items()))
        lines.para(visible(f"your packages at other versions where yours did not resolve beside "
                           f"the release: {text}"), "  ", "", style="dim")
    for e in result.explained:
        if e.diff is None:
            continue
        lines.line()
        render_diff(f"{label(package, e.move.previous)} -> {e.move.release}", [e.diff],
                    lines.console.file, before=label(package, e.move.previous),
                    after=label(package, e.move.release), width=width, plain=plain)
        rest = _unexplained(e)
        if rest:
            lines.para(visible(rest), "    ", "  ", style="dim")
    lines.line()
    lines.table(_tried_table(result, lines),
                "Every release tried (* the first with new figures), bytes per device:")
    lines.para(f"Tried {len(result.tried)} of {len(result.releases)} releases of {package} "
               f"in {req.range}; environments: {result.environments_built} built, "
               f"{result.environments_reused} reused; {result.seconds:.0f} s. "
               f"Each run's report and log: {result.work}", "  ", "", style="dim")


def check_lines(result: Result, failing: set[str]) -> list[str]:
    """What ``check --bisect`` says: each move of a function that failed, with
    its pass; or that no release in the range moved them."""
    req = result.request
    out = []
    for e in result.explained:
        if e.name in failing:
            out.append(f"--bisect: {answer(e, req.package, req.min_change)}")
            said = pass_line(e, req.package)
            if said:
                out.append(f"  {said}")
    if not out:
        ran = [t.release for t in result.tried if t.status == "ran"]
        if not ran:
            return [f"--bisect: the program ran on no release of JAX in {req.range}"]
        names = ", ".join(sorted(failing))
        out.append(f"--bisect: no release of JAX from {ran[0]} to {ran[-1]} moved {names}'s "
                   f"figures by more than {req.min_change:.1%}: the change is the program's or "
                   "its other packages'")
    else:
        out.append(f"  (releases tried: {', '.join(t.release for t in result.tried)}; "
                   f"memscope bisect --jax {req.range} explains each move by the buffers at "
                   "its peak, and tells the XLA pass that made it where one did)")
    return out


def render_bisect_json(result: Result) -> str:
    """``memscope bisect -o``'s JSON (docs/report-format.md, "The bisect")."""
    def function_rows(t: Tried) -> list[dict[str, Any]]:
        return [{"function": k, **v} for k, v in t.functions.items()]

    req = result.request
    data = {
        "schema": "memscope.bisect/1",
        "package": req.package,
        "range": str(req.range),
        "program": {"name": req.script.name, "argv": list(req.script.args),
                    "module": req.script.module},
        "function": req.function,
        "target": req.target_spec,
        "min_change": req.min_change,
        "releases": result.releases,
        "unsupported": result.unsupported,
        "interrupted": result.interrupted,
        "tried": [{"release": t.release, "status": t.status, "error": t.error,
                   "python": t.extra.get("python"), "installed": t.extra.get("installed"),
                   "environment_reused": t.extra.get("reused"),
                   "changed_packages": [{"name": n, "yours": y, "here": h}
                                        for n, y, h in t.extra.get("changed", ())],  # type: ignore[attr-defined]
                   "functions": function_rows(t)} for t in result.tried],
        "runs_on": list(result.found.runs_on) if result.found.runs_on else None,
        "first_moved": [_move_json(e) for e in result.explained],
        "environments_built": result.environments_built,
        "environments_reused": result.environments_reused,
        "seconds": round(result.seconds, 1),
    }
    return json.dumps(data, indent=1) + "\n"


def _move_json(e: Explained) -> dict[str, Any]:
    m = e.move
    changes = []
    if e.diff is not None and e.diff.peak_changes:
        changes = [{"role": c.role, "where": c.where, "op": c.op, "kind": c.kind,
                    "bytes": c.change, "before": c.before, "after": c.after}
                   for c in e.diff.peak_changes]
    passes = None
    if e.passes is not None:
        passes = {"found": e.passes.passes,
                  "near": [{"pass": n, **f} for n, f in e.passes.near],
                  "tried": e.passes.tried,
                  "candidates": e.passes.candidates, "crashed": e.passes.crashed,
                  "failed": e.passes.failed, "note": e.passes.note}
    return {"function": e.name, "source": e.source, "key": m.function, "release": m.release,
            "previous": m.previous, "untried_between": list(m.untried),
            "before": m.before, "after": m.after,
            "changes": changes, "peak_before": e.diff.peak_before if e.diff else None,
            "temporaries_by_source": [{"where": w, "before": a, "after": b, "ops": list(o)}
                                      for w, a, b, o in e.temporaries],
            "peak_after": e.diff.peak_after if e.diff else None, "passes": passes}
