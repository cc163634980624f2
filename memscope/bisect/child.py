"""What ``memscope bisect`` runs in a release's environment:
``python -m memscope.bisect.child REQUEST.json``.

Two kinds of request (JSON):

- a try: the program run under memscope, as ``memscope run --advice off``
  runs it (to the end, or until ``function`` has run), its report written to
  ``report``;
- passes: the program run until ``function`` has run, then that function
  compiled again as JAX compiles it, once with XLA's dump of every pass
  (``discover``: the passes that changed its program, in the order they ran)
  and once with each pass in ``passes`` (or each discovered) disabled
  (``xla_disable_hlo_passes``), a JSON line each in ``out``, written as it
  goes: a pass whose absence crashes XLA is the one started and not ended.

Its stdout and stderr are the program's.
"""

from __future__ import annotations

import json
import re
import sys
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

from memscope.capturing.deferred import capture_on_import
from memscope.check.compare import MEMORY_FIGURES
from memscope.errors import MemscopeError
from memscope.flow import run_and_report
from memscope.program.runner import Script, run_script
from memscope.report import save_report

if TYPE_CHECKING:
    from memscope.compiled.targets import Target

_PASS_FILE = re.compile(r"\.(\d{4})\.[^.]+\.after_([^.]+)\.before_")


def _accelerator(spec: str | None) -> Target | None:
    """The ``--target`` the bisect was given, set up before the program runs
    (as ``memscope run --target`` sets it up); ``None`` for this machine."""
    if spec is None:
        return None
    from memscope.compiled.targets import open_target

    return open_target(spec)


def _script(request: dict[str, Any]) -> Script:
    return Script(request["program"], tuple(request["args"]), module=request["module"],
                  packages=tuple(request.get("user_packages", ())))


def run_try(request: dict[str, Any]) -> int:
    def deliver(report: Any) -> None:
        save_report(report, request["report"])

    report = run_and_report(_script(request), advise="off", deliver=deliver,
                            target=_accelerator(request.get("target_spec")),
                            stop_at_function=request.get("function"))
    return report.run.exit_code if report.run is not None else 0


def _line(out: Any, record: dict[str, Any]) -> None:
    out.write(json.dumps(record) + "\n")
    out.flush()


def dumped_passes(folder: str) -> list[str]:
    """The passes that changed the program, in the order they ran, from the
    file names of XLA's per-pass dump (``....0012.<pipeline>.after_<pass>.before_<next>.txt``)."""
    found = []
    for path in Path(folder).iterdir():
        match = _PASS_FILE.search(path.name)
        if match and match[2] != "pipeline-start":
            found.append((int(match[1]), match[2]))
    order: list[str] = []
    for _, name in sorted(found):
        if name not in order:
            order.append(name)
    return order


def run_passes(request: dict[str, Any]) -> int:
    from memscope.compiled.compile import compile_to_read
    from memscope.variants.fit import retrace

    target_spec = request.get("target_spec")
    chips = _accelerator(target_spec)
    name = request["function"]
    with capture_on_import(advise="off", keep_calls=True, stop_at_function=name,
                           target=chips) as pending:
        run_script(_script(request), on_finish=pending.finish, on_error=pending.explain)
    session = pending.session
    with open(request["out"], "a") as out:
        entry = next((e for e in session.entries if e.name == name and e.call is not None),
                     None) if session is not None else None
        if entry is None or entry.call is None or session is None:
            _line(out, {"error": f"{name} was not called"})
            return 0
        target = session.target
        traced = retrace(entry.call, entry.call.args, entry.call.kwargs)
        lowered = target.lower(traced)
        base = target.options(lowered)

        def figures(options: dict[str, Any]) -> dict[str, int | None]:
            compiled = compile_to_read(target, traced, lowered, options={**base, **options})
            memory = target.memory(traced, lowered, compiled)
            return {f: getattr(memory, f, None) for f in MEMORY_FIGURES}

        passes = request.get("passes", ())
        if request.get("discover"):
            with tempfile.TemporaryDirectory(prefix="memscope-passes-") as folder:
                as_written = figures({"xla_dump_to": folder, "xla_dump_hlo_pass_re": ".*"})
                discovered = dumped_passes(folder)
                _line(out, {"discovered": discovered, "memory": as_written})
            if passes == "discovered":
                passes = discovered
        for name_of_pass in passes:
            _line(out, {"started": name_of_pass})
            try:
                found = figures({"xla_disable_hlo_passes": name_of_pass})
            except Exception as e:
                _line(out, {"pass": name_of_pass,
                            "error": (str(e).strip().splitlines() or [type(e).__name__])[0]})
                continue
            _line(out, {"pass": name_of_pass, "memory": found})
    return 0


def main(argv: list[str]) -> int:
    request = json.loads(Path(argv[0]).read_text())
    try:
        if request["kind"] == "passes":
            return run_passes(request)
        return run_try(request)
    except MemscopeError as e:  # one line, the last of the log: the bisect says it
        print(f"memscope: error: {e}", file=sys.stderr)
        return e.exit_code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
