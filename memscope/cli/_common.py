"""Options and checks shared by the subcommands that run a program."""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Callable
from typing import IO, TYPE_CHECKING, Any, TypeVar

import click

from memscope import _versions
from memscope.errors import MemscopeError
from memscope.program.runner import Script
from memscope.render.text import visible
from memscope.report import INPUT_FATES, OUTPUT_FATES, REF_ACCESSES, Report, write_whole
from memscope.views.leaves import LeafFilter, unmatched_pattern

if TYPE_CHECKING:
    from memscope.compiled.targets import Target

F = TypeVar("F", bound=Callable[..., Any])


def module_option(f: F) -> F:
    """``-m`` (run SCRIPT as a module) and ``--user-package NAME`` (repeatable)."""
    f = click.option("--user-package", "user_packages", multiple=True, metavar="NAME",
                     help="Count the installed package NAME as your own code too "
                          "(repeatable): its functions get the advice, and its lines "
                          "are call sites. The script's folder, and with -m the "
                          "package the module is in, are always yours.")(f)
    return click.option("-m", "--module", "as_module", is_flag=True,
                        help="Run SCRIPT as a module, like python -m.")(f)


def output_option(f: F) -> F:
    return click.option("-o", "--output", metavar="FILE.json",
                        help="Also save the report as JSON (written however the run "
                             "ends).")(f)


def stop_after_option(f: F) -> F:
    return click.option("--stop-after", type=click.IntRange(min=1), metavar="N",
                        help="End the program once N jitted calls have run (each "
                             "signature needs only its first call); the run's outcome "
                             "is then 'stopped'.")(f)


def check_writable(path: str, option: str = "--output") -> None:
    """Fail before the run, so a long training run is not lost to a typo.

    Raises:
        MemscopeError: the path is empty, a folder, an existing file that cannot be
            written, or in a missing or read-only folder.
    """
    folder = os.path.dirname(os.path.abspath(path))
    if not path:
        raise MemscopeError(f"cannot write the report: the {option} path is empty")
    if os.path.isdir(path):
        raise MemscopeError(f"cannot write the report to {path}: it is a folder")
    if not os.path.isdir(folder):
        raise MemscopeError(f"cannot write the report to {path}: no folder {folder}")
    if os.path.exists(path) and not os.access(path, os.W_OK):
        raise MemscopeError(f"cannot write the report to {path}: the file is not writable")
    if not os.access(folder, os.W_OK):
        raise MemscopeError(f"cannot write the report to {path}: {folder} is not writable")


def output_paths(script: Script | None, **given: str | None) -> dict[str, str | None]:
    """Each output path checked and made absolute before the program runs (which may
    change the working directory); keys are option names (``output``, ``html``).

    Raises:
        MemscopeError: as :func:`check_writable`; a path that is the program's own
            file; two options naming the same file.
    """
    script_file = _program_file(script)
    resolved: dict[str, str | None] = {}
    for name, path in given.items():
        option = f"--{name.replace('_', '-')}"
        if path is None:
            resolved[name] = None
            continue
        check_writable(path, option)
        full = os.path.abspath(path)
        if script_file is not None and os.path.realpath(full) == script_file:
            raise MemscopeError(f"cannot write the report to {path}: it is the script "
                                "to run; give another file")
        if os.path.realpath(full) in {os.path.realpath(p) for p in resolved.values() if p}:
            raise MemscopeError(f"{option} {path} names a file another option writes too")
        resolved[name] = full
    return resolved


def _program_file(script: Script | None) -> str | None:
    if script is None:
        return None
    if script.module:
        try:
            spec = importlib.util.find_spec(script.name)
        except (ImportError, ValueError):
            return None
        origin = spec.origin if spec is not None else None
        return os.path.realpath(origin) if origin else None
    return os.path.realpath(script.name)


def unreadable_line(report: Report) -> str | None:
    """One line naming the functions whose compiled program could not be read
    (their figures are missing from the report); ``None`` when all were read."""
    failed = report.unreadable()
    if not failed:
        return None
    first = failed[0]
    more = f" and {len(failed) - 1} more" if len(failed) > 1 else ""
    return (f"memscope: could not read the compiled program of {len(failed)} function"
            f"{'s' if len(failed) != 1 else ''} on JAX {report.environment.jax}: "
            f"{first.name} ({first.error}){more}; their figures are missing from the report")


def unverified_jax_line() -> str | None:
    """The one-line warning for a run on a JAX whose figures are unverified: a
    series newer than memscope is verified on, or an older one the user allowed.
    Said here, it is not logged again when the run starts capturing."""
    line = _versions.unverified_once()
    return None if line is None else f"memscope: warning: {line}"


def nothing_called(program: str, outcome: str, hint: str = "") -> str:
    ended = "" if outcome in ("completed", "stopped") else f" before it {outcome}"
    return visible(f"memscope: {program} called no jitted function{ended}; nothing to "
                   f"report{hint}")


def misplaced_hint(ctx: click.Context, args: tuple[str, ...], example: str) -> str:
    """A hint for errors when the script's arguments hold memscope's own options.

    memscope's options go before SCRIPT (everything after it is the script's,
    as with python), so one typed after SCRIPT went to the script instead.
    """
    names = {opt for param in ctx.command.params for opt in getattr(param, "opts", ())
             if opt.startswith("--")}
    found = [a.partition("=")[0] for a in args if a.partition("=")[0] in names]
    if not found:
        return ""
    return (f" ({found[0]} came after SCRIPT, so it went to the script: memscope's options "
            f"go before SCRIPT, as in {example})")


def buffers_option(f: F) -> F:
    return click.option("--buffers", is_flag=True,
                        help="Also show what is live at the peak of memory over "
                             "program order (from the compiled schedule, on every "
                             "backend) by source line, and what holds the memory: the "
                             "largest temporary buffers with their op and source line, "
                             "per line totals.")(f)


#: What --fate accepts: every input and output fate, a ``jax.Ref``'s
#: (``ref_updated``, ...), and ``candidate``.
LEAF_FATES = (*INPUT_FATES, *OUTPUT_FATES, *(f"ref_{a}" for a in REF_ACCESSES), "candidate")


def leaves_options(f: F) -> F:
    """``--leaves``, ``--path PATTERN`` and ``--fate FATE``: every leaf, on request."""
    f = click.option("--fate", type=click.Choice(LEAF_FATES), metavar="FATE",
                     help="With --leaves: only leaves with this fate (or 'candidate'); "
                          "implies --leaves. One of: " + ", ".join(LEAF_FATES) + ".")(f)
    f = click.option("--path", "path_pattern", metavar="PATTERN",
                     help="With --leaves: only leaves under this path or matching this "
                          "glob (opt_state, \"params['layers']*\", '*bias'); implies "
                          "--leaves. One that selects no leaf is said on stderr.")(f)
    return click.option("--leaves", is_flag=True,
                        help="Also list every leaf of each function, whole, with its shape, "
                             "size, fate, partner and reason (the default output groups "
                             "them).")(f)


def detail_option(f: F) -> F:
    return click.option("--detail", is_flag=True,
                        help="Every function's section in full: its arguments' subtrees, "
                             "every merged reason, the donation variants' table and the "
                             "terms (by default only functions with something to change "
                             "get a section, one line per argument).")(f)


def format_option(f: F) -> F:
    return click.option("--format", "output_format",
                        type=click.Choice(["terminal", "markdown"]), default="terminal",
                        show_default=True,
                        help="How to print the report: for a terminal or a log, or as "
                             "markdown to paste into a pull request or an issue (the "
                             "answer and the figures, bounded like check's).")(f)


def leaf_filter(leaves: bool, path_pattern: str | None, fate: str | None) -> LeafFilter | None:
    """What to list leaf by leaf; ``None`` for the grouped view only.

    Raises:
        MemscopeError: ``--path`` is empty (an unset shell variable, most often):
            it would select nothing, so it is refused before any run.
    """
    if path_pattern is not None and not path_pattern.strip():
        raise MemscopeError(f"--path {path_pattern!r}: the pattern is empty; give a leaf "
                            "path (\"params['w']\") or a glob ('*bias')")
    if not (leaves or path_pattern is not None or fate is not None):
        return None
    return LeafFilter(path_pattern, fate)


def unmatched_path_line(report: Report, which: LeafFilter | None) -> str | None:
    """The warning line for a ``--path`` that selects no leaf of any function of
    ``report`` (the report itself is still printed and saved); ``None`` otherwise."""
    if which is None or which.pattern is None:
        return None
    text = unmatched_pattern(report.functions, which.pattern)
    return None if text is None else f"memscope: warning: {visible(text)}"


def html_option(f: F) -> F:
    return click.option("--html", "html", metavar="FILE.html",
                        help="Also write the report as one self-contained HTML file "
                             "(no network needed to view it).")(f)


def target_option(f: F) -> F:
    return click.option("--target", "target_spec", metavar="tpu:GEN:TOPOLOGY|gpu:MODEL[:N]",
                        help="Also compile every captured function for this accelerator, "
                             "and report its figures per device: a TPU topology (e.g. "
                             "tpu:v5p:2x2x1, tpu:v5e:2x4, tpu:v6e:2x2) with libtpu's "
                             "compiler, or N NVIDIA GPUs of a model (e.g. gpu:h100, "
                             "gpu:h100:8, gpu:a100-80gb:4, gpu:b200:8) with XLA:GPU's "
                             "compiler (the first --target installs it into memscope's own "
                             "folder, where JAX does not load it into your programs: see "
                             "memscope install-compiler). The script runs here, on the "
                             "CPU, with as many devices as the target; nothing runs on the "
                             "accelerator.")(f)


def given_target(text: str | None) -> Target | None:
    """The ``--target`` accelerator, set up before the script runs; ``None`` if
    not given (the script's functions are compiled for this machine).
    It starts JAX, on the CPU with the target's devices, before the program runs
    (the one case where memscope imports JAX first: docs/cli.md).

    Raises:
        TargetSetupError: an unknown form, model or topology, or its compiler is
            not installed.
    """
    if text is None:
        return None
    from memscope.compiled.targets import open_target

    return open_target(text)


def trace_option(f: F) -> F:
    return click.option("--trace", "trace", metavar="FILE.json",
                        help="Also write the run as a Chrome/Perfetto trace: device "
                             "memory per device and per group of live arrays, a slice "
                             "per jitted call (open it in the Perfetto UI or "
                             "chrome://tracing).")(f)


def write_trace(report: Report, path: str) -> None:
    """Write ``report``'s run as a trace file at ``path``.

    Raises:
        ReportFormatError: the file cannot be written.
    """
    from memscope.render.trace import render_trace  # only when asked for

    _write_rendered(report, path, render_trace)


def write_html(report: Report, path: str) -> None:
    """Write ``report`` as one HTML file at ``path``.

    Raises:
        ReportFormatError: the file cannot be written.
    """
    from memscope.render.html import render_html  # only when asked for

    _write_rendered(report, path, render_html)


def _write_rendered(report: Report, path: str,
                    render: Callable[[Report, IO[str]], None]) -> None:
    """Render ``report`` whole in memory, then write it: a failed render leaves no
    half-written file."""
    import io

    text = io.StringIO()
    render(report, text)
    write_whole(path, text.getvalue())
