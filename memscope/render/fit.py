"""``memscope fit``'s output: the answer first, then the sizes compiled.

Plain text and JSON; nothing is computed here.
"""

from __future__ import annotations

import dataclasses
import json
from typing import IO

from memscope.render.text import visible
from memscope.report import Forecast
from memscope.report.function import LINE_TOLERANCE
from memscope.report.units import format_bytes, format_bytes_apart

#: The schema of ``memscope fit --format json``.
FIT_SCHEMA = "memscope.fit/1"


def render_fit_text(f: Forecast, file: IO[str]) -> None:
    """The largest batch that fits (and with the advised donation), the axis, the
    line, then one row per size compiled."""
    lines = [f"memscope fit: {visible(f.function)} ({visible(f.source or 'n/a')})"]
    budget = visible(budget_text(f.budget_bytes, f.memory_bytes, f.held_bytes, f.held_note,
                                 f.memory_source))
    if f.batch_note is not None:
        lines.append(f"No batch answer for {budget}: {visible(f.batch_note)}"
                     + (f" (the largest size compiled that fits, {f.largest}, counts "
                        "input bytes)" if f.largest is not None else ""))
    elif f.largest is not None:
        peaks = {r.batch: r.peak_bytes for r in f.rows}
        over = f.largest + f.step if f.confirmed else f.above
        # Enough digits that the two sides of the boundary and the budget read apart.
        below, above, limit = format_bytes_apart(
            [peaks.get(f.largest), peaks.get(over) if over else None, f.budget_bytes])
        if any(r.batch == over and r.refused for r in f.rows):
            above = "too large for the target's compiler"
        lines.append(f"Largest batch that fits {budget}: {f.largest}"
                     + ("" if f.confirmed else ", the largest compiled (unconfirmed)")
                     + f" (compiled: {f.largest} -> {below}"
                     + (f", {over} -> {above}" if over is not None else "")
                     + f"; budget {limit})")
    else:
        lines.append(f"Largest batch that fits {budget}: none"
                     + (f" ({visible(f.note)})" if f.note else ""))
    if f.advised_setting is not None and f.batch_note is None:
        lines.append(f"With the advised donation ({visible(f.advised_setting)}): "
                     + (str(f.advised_largest) if f.advised_largest is not None else "n/a"))
    lines.append(f"batch axis: {visible(f.choice_note or f.argument)}; now {f.batch}, "
                 f"step {f.step}")
    if f.linear:
        lines.append(f"peak = {format_bytes(f.fixed_bytes)} fixed + "
                     f"{format_bytes(f.per_example_bytes)} per example (within "
                     f"{LINE_TOLERANCE:.0%} at every size compiled)")
    else:
        lines.append(f"peak: not linear in the batch (no line through the sizes compiled "
                     f"holds within {LINE_TOLERANCE:.0%} at each): read it off the table")
    if f.note and f.largest is not None and f.batch_note is None:
        lines.append(f"note: {visible(f.note)}")
    if f.compile_note:
        lines.append(f"note: {visible(f.compile_note)}")
    advised = f.advised_setting is not None
    header = (f"{'batch':>10}  {'peak':>12}  fits"
              + (f"  {'advised':>12}  fits" if advised else ""))
    lines += ["", header]
    # One precision for the whole table: rows close to the budget read apart.
    texts = format_bytes_apart([f.budget_bytes, *(r.peak_bytes for r in f.rows),
                                *(r.advised_peak_bytes for r in f.rows)])[1:]
    peak_texts, advised_texts = texts[:len(f.rows)], texts[len(f.rows):]
    for r, peak, advised_peak in zip(f.rows, peak_texts, advised_texts, strict=True):
        if r.refused:
            peak = "too large"
        if r.advised_refused:
            advised_peak = "too large"
        lines.append(f"{r.batch:>10}  {peak:>12}  "
                     f"{'no' if r.refused else _fits(r.peak_bytes, f.budget_bytes):>4}"
                     + (f"  {advised_peak:>12}  "
                        f"{'no' if r.advised_refused else _fits(r.advised_peak_bytes, f.budget_bytes):>4}"
                        if advised else ""))
    lines += ["", f"{f.compiles} compiles in {f.seconds:.1f} s; nothing ran on the device. "
              "peak: memscope's rule (XLA's peak where it gives one, at least argument + "
              "output - alias + temp)"]
    file.write("\n".join(lines) + "\n")


def render_fit_json(f: Forecast, file: IO[str], *, outcome: str) -> None:
    """The forecast as JSON (schema ``memscope.fit/1``)."""
    data = {"schema": FIT_SCHEMA, "program_outcome": outcome, **dataclasses.asdict(f)}
    file.write(json.dumps(data, indent=2) + "\n")


def budget_text(budget: int | None, memory: int | None, held: int | None,
                held_note: str | None, source: str | None) -> str:
    """``59.3 GiB (the room on gpu:h100:1: 75% of 79.1 GiB, ...)``: the budget,
    the memory it is of less what the process held, and which rule gave that
    memory (plain text: each format escapes it)."""
    text = format_bytes(budget)
    if held:
        parts = (f"{format_bytes(memory)} less {format_bytes(held)} "
                 f"{held_note or 'held outside the function arguments'}")
        text += f" ({parts}; {format_bytes(memory)}: {source})" if source else f" ({parts})"
    elif source:
        text += f" ({source})"
    return text


def _fits(peak: int | None, budget: int | None) -> str:
    if peak is None or budget is None:
        return "n/a"
    return "yes" if peak <= budget else "no"
