"""The flags the faces share: the advice flags every face that runs a program takes (``--advice``,
``--no-advice``, ``--remat/--no-remat``, ``--remat-flops``: ``memscope run``,
``%%memscope``), parsed here into the plain values the capture takes."""

from __future__ import annotations

from memscope.analysis.advice import DEFAULT_MAX_FLOPS_INCREASE, AdviceLevel
from memscope.errors import MemscopeError


def advice_options(advice: AdviceLevel | None, no_advice: bool, remat: bool | None,
                   remat_flops: float | None) -> tuple[AdviceLevel, float | None]:
    """The advice level and ``capture``'s ``remat_flops`` for the advice flags.

    Raises:
        MemscopeError: ``--no-advice`` with another ``--advice``, or a negative
            ``--remat-flops``.
    """
    if no_advice and advice not in (None, "off"):
        raise MemscopeError(f"--no-advice and --advice {advice} contradict each other; "
                            "give one of them")
    if remat_flops is not None and remat_flops < 0:
        raise MemscopeError("--remat-flops must be at least 0")
    level: AdviceLevel = "off" if no_advice else advice or "advised"
    return level, remat_setting(remat, remat_flops, level)


def remat_setting(on: bool | None, flops: float | None, advice: str) -> float | None:
    """``capture``'s ``remat_flops`` for ``--remat/--no-remat``, ``--remat-flops``
    and ``--advice``: on when asked for, given a limit, or with full advice."""
    if on is False or advice == "off":
        return None
    if on or flops is not None or advice == "full":
        return DEFAULT_MAX_FLOPS_INCREASE if flops is None else flops
    return None
