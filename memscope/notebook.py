"""``%load_ext memscope``: the ``%%memscope`` cell magic and the ``%memscope`` line magic.

``%%memscope [options]`` runs its cell as ``memscope run`` runs a script: under
:func:`~memscope.capturing.capture`, then reported, bound to a name
(``memscope_report``, or ``-r NAME``) and displayed: the HTML report's body
where the front end shows HTML, the terminal report as plain text elsewhere.
``%memscope [options] STATEMENT`` does the same for one statement.

The cell runs as IPython runs any cell (``shell.run_cell``, as ``%%capture``
does), under its own ``In[N]``: its variables, its output history (``Out``,
``_``, ``_N``) and the display of its last expression are as without the magic.
Jit objects the notebook's variables hold, made in earlier cells, record too
(:func:`~memscope.capturing.recorder.measure_names`); arrays kept alive only by
the output history are named by its entry (``Out[3]``). Functions defined in
cells are named by their cell (``In[3]:5``).

An exception in the cell is kept, not shown, until the report of what ran is
displayed; then IPython shows it as it shows any (``%tb`` and ``%debug`` see it)
and the cell fails as it would have. ``--stop-after N`` ends the cell quietly.

IPython is imported here only: it is not a dependency of memscope.
"""

from __future__ import annotations

import contextlib
import io
import re
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from types import TracebackType
from typing import Any

from IPython.core.error import UsageError
from IPython.core.magic import Magics, line_cell_magic, magics_class
from IPython.core.magic_arguments import argument, magic_arguments, parse_argstring
from IPython.display import display

from memscope.analysis.advice import ADVICE_LEVELS, AdviceLevel
from memscope.capturing import Session, capture
from memscope.capturing.holders import OutputHistory
from memscope.capturing.recorder import measure_names
from memscope.errors import MemscopeError, ProgramStopped, described
from memscope.flow import session_report
from memscope.options import advice_options
from memscope.program import sites
from memscope.program.runner import RunResult, ended_by
from memscope.render.html import render_html, report_fragment
from memscope.render.inline import report_text
from memscope.report import Report, RunInfo, save_report, write_whole

#: The name ``%%memscope`` binds the report to, unless ``-r NAME`` says another.
REPORT_NAME = "memscope_report"
#: Options of ``%memscope`` that take a value (the statement follows the options).
_VALUED = frozenset({"--advice", "--remat-flops", "--stop-after", "-o", "--output",
                     "--html", "-r", "--report"})
_TOKEN = re.compile(r"\s*(\S+)")

ExcInfo = tuple[type[BaseException], BaseException, TracebackType | None]


def register_magics(shell: Any) -> None:
    """Register the magics with ``shell`` and name its cells' code ``In[N]``."""
    shell.register_magics(MemscopeMagics)
    sites.name_sources(lambda path: _cell_name(shell, path))


def unregister_magics(shell: Any) -> None:
    """Take the magics and the cells' names away again."""
    sites.name_sources(None)
    for kind in ("line", "cell"):
        shell.magics_manager.magics[kind].pop("memscope", None)


def _cell_name(shell: Any, path: str) -> str | None:
    """``In[3]`` for the code IPython compiled from cell 3, else ``None``."""
    label = shell.compile.format_code_name(path)
    return label[1] if label else None


@magics_class
class MemscopeMagics(Magics):
    """``%%memscope`` and ``%memscope``."""

    @magic_arguments()
    @argument("--advice", choices=ADVICE_LEVELS, default=None,
              help="Which donations to compile and measure besides the cell's own: "
                   "'advised' (the default) the advisor's donation, 'full' also no "
                   "donation and donate all, 'off' none.")
    @argument("--no-advice", action="store_true", help="The same as --advice off.")
    @argument("--remat", dest="remat", action="store_const", const=True, default=None,
              help="For functions that differentiate: list what the backward pass keeps "
                   "and compile each jax.checkpoint policy (on with --advice full or "
                   "--remat-flops).")
    @argument("--no-remat", dest="remat", action="store_const", const=False,
              help="No remat analysis, even with --advice full.")
    @argument("--remat-flops", type=float, default=None, metavar="FRACTION",
              help="With --remat: advise the policy with the largest measured saving "
                   "whose FLOPs grow by at most FRACTION (default 0.35).")
    @argument("--stop-after", type=int, default=None, metavar="N",
              help="End the cell after N jitted calls (quietly: the cell does not fail).")
    @argument("--buffers", action="store_true",
              help="Add what holds the memory per function to the plain-text report "
                   "(the HTML report always has it).")
    @argument("-o", "--output", default=None, metavar="FILE.json",
              help="Also save the report as JSON (memscope show, diff and check read it).")
    @argument("--html", default=None, metavar="FILE.html",
              help="Also write the report as one self-contained HTML file.")
    @argument("-r", "--report", default=REPORT_NAME, metavar="NAME",
              help=f"The variable the Report is bound to (default {REPORT_NAME}).")
    @argument("-q", "--quiet", action="store_true",
              help="Do not display the report (it is still bound, and saved where asked).")
    @line_cell_magic
    def memscope(self, line: str, cell: str | None = None) -> None:
        """Run the cell (``%%memscope``) or the statement after the options
        (``%memscope``) as memscope run runs a script, then display its report
        and bind it to a variable (a memscope.Report): per jitted function its
        peak, what is wrong with its donation and what to change, measured.

        The cell runs as any cell does: its variables, its output (Out, _) and
        an exception it raises are as without the magic; the report of what ran
        is shown before the exception. Jitted functions the notebook's
        variables hold, made in earlier cells, are measured too.
        """
        if cell is None:
            options, cell = _split_line(line)
            if not cell.strip():
                raise UsageError("%memscope needs a statement to run after its options "
                                 "(%%memscope runs a whole cell)")
        else:
            options = line
        args = parse_argstring(self.memscope, options)
        if not args.report.isidentifier():
            raise UsageError(f"-r {args.report}: not a Python name to bind the report to")
        try:
            level, remat_at = advice_options(args.advice, args.no_advice, args.remat,
                                             args.remat_flops)
            run_and_show(self.shell, cell, advise=level, remat_flops=remat_at,
                         stop_after=args.stop_after, name=args.report, quiet=args.quiet,
                         buffers=args.buffers, output=args.output, html=args.html)
        except MemscopeError as e:  # before the cell ran: a bad option, an unsupported JAX
            raise UsageError(str(e)) from None


def _split_line(line: str) -> tuple[str, str]:
    """``%memscope``'s line as (its options, the statement after them); ``--``
    ends the options."""
    pos, value_next = 0, False
    while (m := _TOKEN.match(line, pos)) is not None:
        token = m.group(1)
        if value_next:
            value_next = False
        elif token == "--":
            return line[:m.start()], line[m.end():]
        elif token.startswith("-") and len(token) > 1:
            value_next = token in _VALUED
        else:
            break
        pos = m.end()
    return line[:pos], line[pos:]


def run_and_show(shell: Any, cell: str, *, advise: AdviceLevel = "advised",
                 remat_flops: float | None = None, stop_after: int | None = None,
                 name: str = REPORT_NAME, quiet: bool = False, buffers: bool = False,
                 output: str | None = None, html: str | None = None) -> Report | None:
    """Run ``cell`` in ``shell`` under a capture, bind its report to ``name`` and
    display it; then show the cell's exception, if any, and fail the cell that
    runs this as the exception would have. ``None`` (and nothing shown but the
    error) when the cell did not even start: a syntax error.

    Raises:
        MemscopeError: the capture could not start (nothing ran).
    """
    number = shell.displayhook.prompt_count
    outer = shell.displayhook.exec_result  # the result of the cell that runs this magic
    with capture(advise=advise, remat_flops=remat_flops, stop_after=stop_after) as session:
        session.live_sampler.history = _history(shell)
        with measure_names(shell.user_ns, session):
            ran = _run_cell(shell, cell, number, outer)
        if ran.error is not None:
            session.ledger.explain(ran.error)
        session.finish()  # while what the cell holds, and its exception's frames, exist
    report = None
    if ran.result.error_before_exec is None:
        report = _report(session, ran.error, number)
    if report is not None:
        shell.push({name: report})
        _deliver(report, quiet=quiet, buffers=buffers, output=output, html=html)
    if ran.error is None or isinstance(ran.error, ProgramStopped):
        return report
    if outer is None:  # not run as a cell's code (shell.run_cell_magic): its caller's error
        raise ran.error
    if ran.unshown is not None:
        _show_exception(shell, ran.unshown, ran.custom)
    outer.error_in_exec = ran.error  # the cell fails, as it would have without memscope
    return report


@dataclass
class _Ran:
    """How the cell ran: IPython's result, the exception that ended it, and that
    exception's info where IPython has not shown it yet (``unshown``); the
    shell's own handler of custom exceptions (``custom``), to show it with."""

    result: Any
    error: BaseException | None
    unshown: ExcInfo | None
    custom: tuple[Any, Any]


def _run_cell(shell: Any, cell: str, number: int, outer: Any) -> _Ran:
    """Run ``cell`` as IPython runs any, as cell ``number``: transformed, its last
    expression shown and kept in ``Out`` (not where it ends in ``;``), but an
    exception it raises kept, not shown."""
    kept: list[ExcInfo] = []

    def keep(etype: type[BaseException], value: BaseException, tb: TracebackType | None,
             tb_offset: int | None = None) -> None:
        kept.append((etype, value, tb))

    custom = (shell.custom_exceptions, shell.CustomTB)
    silent = _ends_in_semicolon(shell, cell)
    with _attributes(shell, custom_exceptions=(BaseException,), CustomTB=keep), \
            _attributes(shell.compile, cache=_numbered(shell.compile.cache, number)):
        try:
            result = shell.run_cell(cell, store_history=False, silent=silent)
        finally:
            shell.displayhook.exec_result = outer  # run_cell let go of the outer one
    if outer is not None and result.result is not None:
        outer.result = result.result
    error = result.error_before_exec or result.error_in_exec
    return _Ran(result, error, kept[0] if kept else None, custom)


def _ends_in_semicolon(shell: Any, cell: str) -> bool:
    """Whether ``cell``'s last expression ends in ``;`` (IPython then shows no
    value). IPython asks it of the cell that runs this magic, so it is asked here
    of this one, and the cell run silently."""
    try:
        return bool(shell.displayhook.semicolon_at_end_of_expression(
            shell.transform_cell(cell)))
    except Exception:  # a syntax error (IPython shows it), an older IPython
        return False


def _numbered(cache: Any, number: int) -> Any:
    """IPython's ``compile.cache``, naming the code it compiles as cell ``number``:
    a cell run within a cell would otherwise be the next cell's (``In[N+1]``)."""
    def numbered(transformed_code: str, number_: int = 0, raw_code: str | None = None) -> Any:
        return cache(transformed_code, number, raw_code=raw_code)
    return numbered


@contextlib.contextmanager
def _attributes(owner: Any, **values: Any) -> Iterator[None]:
    """``owner``'s instance attributes set to ``values`` for the block, then as they were."""
    own = vars(owner)
    saved = {name: own[name] for name in values if name in own}
    for name, value in values.items():
        setattr(owner, name, value)
    try:
        yield
    finally:
        for name in values:
            if name in saved:
                setattr(owner, name, saved[name])
            else:
                with contextlib.suppress(AttributeError):
                    delattr(owner, name)


def _history(shell: Any) -> OutputHistory:
    """IPython's output history (``Out``, also ``_oh``) in the user namespace, and
    which names there are IPython's own (``_``, ``_3``, ``Out``, ``In``): by its
    rule for ``%who``, those it put there and the user has not bound since."""
    hidden, namespace, missing = shell.user_ns_hidden, shell.user_ns, object()

    def shell_name(name: str) -> bool:
        return name in hidden and hidden[name] is namespace.get(name, missing)
    outputs = getattr(shell.history_manager, "output_hist", None)
    return OutputHistory(namespace=namespace, name="Out", shell_name=shell_name,
                         outputs=outputs if isinstance(outputs, dict) else {})


def _report(session: Session, error: BaseException | None, number: int) -> Report | None:
    """The cell's report; ``None`` (and one line on stderr) where memscope fails."""
    ended = ended_by(error) if error is not None else RunResult("completed", 0)
    if session.stopped:  # even where the cell caught ProgramStopped and went on
        ended = RunResult("stopped", 0)
    run = RunInfo(program=f"In[{number}]", argv=(), outcome=ended.outcome,
                  exit_code=ended.exit_code, error=ended.error, cell=True)
    try:
        return session_report(session, run, forecast=True)
    except Exception as e:  # memscope's failure must not hide the cell's own outcome
        print(f"memscope: could not report the cell: {described(e)}", file=sys.stderr)
        return None


def _deliver(report: Report, *, quiet: bool, buffers: bool, output: str | None,
             html: str | None) -> None:
    """Save the report where asked, then display it (HTML and plain text)."""
    try:
        if output is not None:
            save_report(report, output)
        if html is not None:
            page = io.StringIO()
            render_html(report, page)
            write_whole(html, page.getvalue())
        if not quiet:
            display({"text/plain": report_text(report, buffers=buffers),
                     "text/html": report_fragment(report)}, raw=True)
    except Exception as e:  # the report is bound; the cell's own outcome still comes
        print(f"memscope: {described(e)}", file=sys.stderr)


def _show_exception(shell: Any, info: ExcInfo, custom: tuple[Any, Any]) -> None:
    """Show the cell's exception as IPython would have: with the handler of the
    custom exceptions the shell had set for it, else its traceback."""
    exceptions, handler = custom
    if exceptions and isinstance(info[1], exceptions):
        handler(*info)
    else:
        shell.showtraceback(info)
