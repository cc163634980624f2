"""``memscope fit``'s text and the post-mortem lines, from hand-built records."""

from __future__ import annotations

import dataclasses
import io

from memscope.render.fit import render_fit_text
from memscope.render.oom import post_mortem_lines
from memscope.report import (
    Environment,
    FitRow,
    Forecast,
    FunctionReport,
    LiveArray,
    LiveArrays,
    Memory,
    OutOfMemory,
    Report,
    XlaBuffer,
)
from memscope.report.units import format_bytes_apart

FORECAST = Forecast(
    function="step", source="train.py:10", argument="batch", axis=0, batch=8, step=1,
    budget_bytes=1 << 30, rows=(FitRow(8, 100 << 20, 90 << 20), FitRow(16, 180 << 20),
                                FitRow(102, 1023 << 20), FitRow(103, 1025 << 20)),
    fixed_bytes=20 << 20, per_example_bytes=10 << 20, linear=True, largest=102,
    advised_largest=None, advised_setting='donate_argnames=("params",)', compiles=3,
    seconds=1.25, inferred=True, choice_note="batch, axis 0 (inferred)",
    memory_bytes=1 << 30, held_bytes=0)


def test_fit_text_answers_first():
    out = io.StringIO()
    render_fit_text(FORECAST, out)
    assert out.getvalue().splitlines() == [
        "memscope fit: step (train.py:10)",
        "Largest batch that fits 1.0 GiB: 102 (compiled: 102 -> 0.999 GiB, 103 -> "
        "1.001 GiB; budget 1.000 GiB)",
        'With the advised donation (donate_argnames=("params",)): n/a',
        "batch axis: batch, axis 0 (inferred); now 8, step 1",
        "peak = 20.0 MiB fixed + 10.0 MiB per example (within 1% at every size compiled)",
        "",
        "     batch          peak  fits       advised  fits",
        "         8   100.000 MiB   yes    90.000 MiB   yes",
        "        16   180.000 MiB   yes           n/a   n/a",
        "       102     0.999 GiB   yes           n/a   n/a",
        "       103     1.001 GiB    no           n/a   n/a",
        "",
        "3 compiles in 1.2 s; nothing ran on the device. peak: memscope's rule (XLA's peak "
        "where it gives one, at least argument + output - alias + temp)",
    ]


ROOM = ("the room on gpu:h100:1: 75% of 79.1 GiB, JAX 0.12's default; "
        "XLA_CLIENT_MEM_FRACTION sets another")


def test_fit_text_says_which_rule_gave_the_targets_room():
    """No ``--memory`` with a GPU target: the budget is the room, and the line says
    which rule gave it; with bytes held outside the function, of what it is less."""
    room = 63_707_234_304
    forecast = dataclasses.replace(FORECAST, budget_bytes=room, memory_bytes=room,
                                   memory_source=ROOM, rows=(), largest=None)
    out = io.StringIO()
    render_fit_text(forecast, out)
    assert out.getvalue().splitlines()[1] == f"Largest batch that fits 59.3 GiB ({ROOM}): none"
    held = dataclasses.replace(forecast, budget_bytes=room - (1 << 20), held_bytes=1 << 20,
                               held_note="alive outside its arguments")
    out = io.StringIO()
    render_fit_text(held, out)
    assert out.getvalue().splitlines()[1] == (
        "Largest batch that fits 59.3 GiB (59.3 GiB less 1.0 MiB alive outside its arguments; "
        f"59.3 GiB: {ROOM}): none")


def test_fit_text_tells_the_boundary_apart():
    """The sizes either side of the boundary never read alike (the issue's 1774 ->
    64.0 MiB, 1775 -> 64.0 MiB): as many decimals as it takes, else whole bytes."""
    budget = 64 << 20
    forecast = dataclasses.replace(
        FORECAST, budget_bytes=budget, memory_bytes=budget, largest=1774,
        rows=(FitRow(1774, budget - 600), FitRow(1775, budget + 36_000)))
    out = io.StringIO()
    render_fit_text(forecast, out)
    head = out.getvalue().splitlines()[1]
    assert head == ("Largest batch that fits 64.0 MiB: 1774 (compiled: 1774 -> 63.999 MiB, "
                    "1775 -> 64.034 MiB; budget 64.000 MiB)")
    # 100 B under the budget reads 64.000 MiB at 3 decimals: whole bytes then.
    assert format_bytes_apart([budget - 100, budget]) == ["67,108,764 B", "67,108,864 B"]
    apart = format_bytes_apart([budget, budget + 36_000, None, 1000])
    assert apart == ["64.00 MiB", "64.03 MiB", "n/a", "1000 B"]
    assert format_bytes_apart([3 << 20, 5 << 20]) == ["3.0 MiB", "5.0 MiB"]
    # A peak just over a budget of 1 GiB reads in the budget's unit, never as
    # "1.0 GiB" beside "1024.0 MiB" (fit --plan's stopped rows said so).
    assert format_bytes_apart([round(1059.3 * 2**20), 1 << 30]) == ["1.03 GiB", "1.00 GiB"]


def test_post_mortem_lines_say_what_failed_and_what_would_fit():
    oom = OutOfMemory(error="RESOURCE_EXHAUSTED: Out of memory allocating 2048 bytes.",
                      failed_in="call", requested_bytes=2048,
                      largest_buffers=(XlaBuffer(2048, "f32[512]", "add", "train.py:12"),),
                      live_arrays=LiveArrays(1, 16, (LiveArray((4,), "float32", 16),)),
                      forecast=FORECAST)
    fn = FunctionReport(name="step", source="train.py:10", calls=1, signature="(f32[8])",
                        memory=Memory(peak_bytes=4096), out_of_memory=oom)
    report = Report("0", Environment("0.10", "0.10", "cpu", ()), None, (fn,))
    assert post_mortem_lines(report) == [
        "OUT OF MEMORY: step (train.py:10): a call failed",
        "  RESOURCE_EXHAUSTED: Out of memory allocating 2048 bytes.",
        "  XLA tried to allocate: 2.0 KiB",
        "  compiled peak: 4.0 KiB per device, against a device limit of n/a; in use when it "
        "failed: n/a",
        "  largest buffers (compiled):",
        "       2.0 KiB  add  f32[512]  train.py:12",
        "  live arrays when it failed: 1, 16 B: largest float32[4] 16 B",
        "  what would fit: batch 102 of batch (axis 0, now 8) under 1.0 GiB",
    ]
