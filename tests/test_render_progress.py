"""Long work's progress line (memscope.render.progress): shown on a terminal,
nothing elsewhere. tests/test_tpu_target.py runs the real command in a real
pseudo-terminal."""

from __future__ import annotations

import io
import os
import pty

from memscope.progress import Step
from memscope.render.progress import progress_text, terminal_progress


def test_the_line_says_what_how_far_and_how_long() -> None:
    step = Step("compiling train_step as written for tpu:v5e:2x2", 1, 2)
    assert progress_text(step, 12.4) == (
        "compiling train_step as written for tpu:v5e:2x2 (1 of 2 done, 12 s)")
    assert progress_text(Step("building an environment", 3), 0.2) == (
        "building an environment (3 done, 0 s)")


def test_nothing_is_written_where_stderr_is_no_terminal_or_quiet() -> None:
    piped = io.StringIO()
    with terminal_progress(stream=piped) as shown:
        shown(Step("compiling f as written for tpu:v5e:2x2", 0, 1))
    assert piped.getvalue() == ""
    primary, secondary = pty.openpty()
    try:
        with open(secondary, "w", closefd=False) as terminal:
            with terminal_progress(quiet=True, stream=terminal) as shown:
                shown(Step("compiling f as written for tpu:v5e:2x2", 0, 1))
            os.set_blocking(primary, False)
            try:
                written = os.read(primary, 4096)
            except BlockingIOError:  # nothing was written
                written = b""
    finally:
        os.close(primary)
        os.close(secondary)
    assert written == b""


def test_a_terminal_shows_the_step_and_takes_it_away_at_the_end() -> None:
    primary, secondary = pty.openpty()
    try:
        with (open(secondary, "w", closefd=False) as terminal,
              terminal_progress(stream=terminal) as shown):
            shown(Step("compiling f [as written] for tpu:v5e:2x2", 0, 1))
            shown.end()
            shown(Step("not shown: the line has ended", 1, 1))
        written = b""
        os.set_blocking(primary, False)
        while True:
            try:
                chunk = os.read(primary, 65536)
            except BlockingIOError:
                break
            if not chunk:
                break
            written += chunk
    finally:
        os.close(primary)
        os.close(secondary)
    text = written.decode()
    # the name shown as written (brackets are not markup), then erased
    assert "memscope: compiling f [as written] for tpu:v5e:2x2 (0 of 1 done, 0 s)" in text
    assert "not shown" not in text
    assert "\x1b[2K" in text.split("done, 0 s)")[-1]  # the line erased
