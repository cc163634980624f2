"""Text shared by the check renderers: what the check was against, and the environment note."""

from __future__ import annotations

from memscope.check.records import CheckResult, EnvDifference, FunctionVerdict
from memscope.views.leaves import parenthesized


def against(result: CheckResult, code: str = "") -> str:
    """``baseline base.json, budgets from pyproject.toml`` (``code`` quotes file names)."""
    parts = []
    if result.has_baseline:
        source = result.baseline_source
        parts.append(f"baseline {code}{source}{code}" if source else "a baseline")
    if result.config_source:
        parts.append(f"budgets from {code}{result.config_source}{code}")
    return ", ".join(parts) or "nothing"


def environment_note(result: CheckResult) -> str:
    head = ("FAIL (--strict-env): the environment differs from the baseline's"
            if result.environment_failed else
            "The environment differs from the baseline's, so the figures may not be comparable")
    text = f"{head}: {environment_text(result.environment)}"
    if result.failed and any(d.field == "jax" for d in result.environment):
        text += ("; memscope check --bisect names the JAX release between the two that moved "
                 "what failed")
    return text


def environment_text(diffs: tuple[EnvDifference, ...]) -> str:
    return "; ".join(f"{d.field} {d.baseline} -> {d.now}" for d in diffs)


def function_label(fn: FunctionVerdict) -> str:
    """``train_step (params: 4 arrays, 8.5 KiB; x: float32[8])``: the name and its
    signature in parentheses (a recorded ``(...)`` signature brings its own)."""
    sig = fn.shown_signature
    return f"{fn.name} {parenthesized(sig)}" if sig else fn.name

