"""The rematerialization part of a report in words, for every renderer.

Pure: takes :class:`memscope.report.Remat` and returns text and rows; the
terminal and HTML renderers lay them out. The answer comes first (what to
change, what it was measured to save), then one line per source line of
residuals, largest first, ending with "and N more".
"""

from __future__ import annotations

from dataclasses import dataclass

from memscope.report import Differentiation, Remat, RematAdvice, RematVariant
from memscope.report.units import format_bytes

#: Source lines of residuals shown per differentiation; the JSON report has all.
RESIDUAL_LINES_SHOWN = 6


@dataclass(frozen=True)
class PolicyRow:
    """One measured policy beside the function as written."""

    policy: str
    peak: str
    flops: str
    change: str
    #: host memory held ("" where no policy in the table offloads)
    host: str = ""


def remat_headline(remat: Remat) -> str | None:
    """The advice in one line: the change, then what it saves at what cost;
    ``None`` when there is none."""
    a = remat.advice
    if a is None:
        return None
    both = (f" together with {a.donation}" if a.donation and a.combined else "")
    return f"{a.code}{both}: {saving(a)}"


def saving(a: RematAdvice) -> str:
    """``peak 95.3 MiB -> 80.1 MiB (saves 15.2 MiB), FLOPs +3.1%``."""
    if a.peak_before is None or a.peak_after is None:
        peak = "peak n/a"
    else:
        peak = (f"peak {format_bytes(a.peak_before)} -> {format_bytes(a.peak_after)} "
                f"(saves {format_bytes(a.peak_before - a.peak_after)})")
    return f"{peak}, FLOPs {flops_change(a.flops_after, a.flops_before)}"


def flops_change(flops: float | None, before: float | None) -> str:
    if flops is None or before is None or before <= 0:
        return "n/a"
    return f"{(flops / before - 1) * 100:+.1f}%"


def no_advice(remat: Remat) -> str | None:
    """Why there is no advice, where residuals were listed and policies measured."""
    limit = remat.max_flops_increase
    if remat.advice is not None or not remat.variants or limit is None:
        return None
    return (f"no checkpoint policy lowers the peak within +{limit * 100:.0f}% FLOPs: "
            "checkpointing the whole differentiated function recomputes its forward "
            "pass at once; put jax.checkpoint around each layer (or scan over layers) "
            "to hold fewer activations at a time")


def differentiation_line(d: Differentiation) -> str:
    """``jax.value_and_grad(loss_fn) at train.py:88 saves 92.0 MiB in 396 residuals``."""
    name = f"{d.api}({d.function})" if d.function else d.api
    where = f" at {d.source}" if d.source else ""
    return (f"{name}{where} saves {format_bytes(d.total_bytes)} in {len(d.residuals)} "
            f"residual{'s' if len(d.residuals) != 1 else ''} for the backward pass")


def residual_lines(d: Differentiation, shown: int = RESIDUAL_LINES_SHOWN
                   ) -> tuple[list[tuple[str, str, str, str]], str | None]:
    """Rows (source, bytes, count, primitives) of the largest lines, and
    ``and N more lines (X)`` for the rest."""
    rows = [(line.source or "arguments and constants", format_bytes(line.bytes),
             f"{line.count} value{'s' if line.count != 1 else ''}",
             ", ".join(line.primitives))
            for line in d.by_line[:shown]]
    rest = d.by_line[shown:]
    more = (f"and {len(rest)} more line{'s' if len(rest) != 1 else ''} "
            f"({format_bytes(sum(line.bytes for line in rest))})") if rest else None
    return rows, more


def policy_rows(remat: Remat) -> list[PolicyRow]:
    """Each measured policy: peak, FLOPs, and the change against as written."""
    written = next((v for v in remat.variants if v.policy == "as_written"), None)
    offloading = offloads(remat)
    rows = []
    for v in remat.variants:
        host = ("n/a" if v.host_bytes is None else format_bytes(v.host_bytes)) \
            if offloading else ""
        rows.append(PolicyRow(_name(v, remat), _peak(v), _flops(v), _change(v, written), host))
    return rows


def offloads(remat: Remat) -> bool:
    """Whether any policy in the table offloads to host (its host column is shown)."""
    return any(v.offloads for v in remat.variants)


def _name(v: RematVariant, remat: Remat) -> str:
    if v.policy == "save_and_offload_only_these_names" and remat.checkpoint_names:
        return f"{v.policy}({', '.join(remat.checkpoint_names)})"
    return v.policy


def _peak(v: RematVariant) -> str:
    if v.error is not None:
        return "error"
    return "n/a" if v.peak_bytes is None else format_bytes(v.peak_bytes)


def _flops(v: RematVariant) -> str:
    return "n/a" if v.flops is None else f"{v.flops:.3g}"


def _change(v: RematVariant, written: RematVariant | None) -> str:
    if v.policy == "as_written" or written is None:
        return ""
    if v.error is not None:
        return v.error
    if v.peak_bytes is None or written.peak_bytes is None:
        return "n/a"
    delta = v.peak_bytes - written.peak_bytes
    sign = "-" if delta < 0 else "+"
    moved = "; moves nothing to host" if v.offloads and v.host_bytes == 0 else ""
    return (f"peak {sign}{format_bytes(abs(delta))}, FLOPs "
            f"{flops_change(v.flops, written.flops)}{moved}")
