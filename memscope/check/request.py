"""What ``memscope check`` was asked to do, checked before anything runs.

A :class:`CheckRequest` is made from the command line's options and nothing
else: :meth:`CheckRequest.make` raises :class:`~memscope.errors.MemscopeError`
for a combination that cannot work (a SCRIPT and ``--report`` both, nothing to
check against, ``--update-baseline`` without a file). Reading the baseline,
running the program and writing the results are the command's
(:mod:`memscope.cli.check`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from memscope.check.records import Config
from memscope.errors import MemscopeError

OutputFormat = Literal["terminal", "markdown"]


@dataclass(frozen=True)
class CheckRequest:
    """One check: what to judge (a SCRIPT run, or a saved ``report_file``), against
    what (``baseline``, ``config``'s budgets), and where its results go."""

    #: the script or module to run (with ``args``), or ``None`` for ``report_file``
    program: str | None
    args: tuple[str, ...]
    as_module: bool
    report_file: str | None
    baseline: str | None
    update_baseline: bool
    config: Config
    strict_env: bool
    allow_empty: bool
    output_format: OutputFormat
    #: a hint appended to errors where memscope's options came after SCRIPT
    misplaced: str = ""

    @classmethod
    def make(cls, *, program: str | None, args: tuple[str, ...], as_module: bool,
             report_file: str | None, baseline: str | None, update_baseline: bool,
             config: Config, strict_env: bool, allow_empty: bool, output_format: str,
             target_spec: str | None, misplaced: str = "") -> CheckRequest:
        """The request the options make.

        Raises:
            MemscopeError: a SCRIPT and ``--report`` both or neither; ``-m``
                without a module; ``--update-baseline`` without ``--baseline``;
                nothing to check against; ``--target`` without a SCRIPT.
        """
        if (program is None) == (report_file is None):
            raise MemscopeError("give a SCRIPT to run or --report REPORT.json, not both or "
                                "neither")
        if as_module and program is None:
            raise MemscopeError("-m needs a MODULE to run")
        if update_baseline and baseline is None:
            raise MemscopeError("--update-baseline needs --baseline FILE.json to write"
                                + misplaced)
        if (not update_baseline and baseline is None and not config.budgets
                and config.max_live_growth is None and config.max_run_peak is None):
            raise MemscopeError("nothing to check against: give --baseline FILE.json, or "
                                "budgets in [tool.memscope.functions.NAME] of pyproject.toml "
                                "or --config" + misplaced)
        if target_spec is not None and program is None:
            raise MemscopeError("--target compiles a SCRIPT's functions: give the SCRIPT")
        assert output_format in ("terminal", "markdown")
        return cls(program=program, args=args, as_module=as_module, report_file=report_file,
                   baseline=baseline, update_baseline=update_baseline, config=config,
                   strict_env=strict_env, allow_empty=allow_empty,
                   output_format=output_format,  # type: ignore[arg-type]
                   misplaced=misplaced)

    @property
    def compares(self) -> bool:
        """Whether the run is judged against a baseline (not writing one)."""
        return self.baseline is not None and not self.update_baseline
