"""Long work's progress on the terminal (memscope/render/progress.py): hand-built
steps into a stream that says it is a terminal, read back as the screen a
terminal would show; and nothing at all where the stream is not one."""

from __future__ import annotations

import io
import re
import threading

import pytest

from memscope.progress import ProgressStep
from memscope.render.progress import progress_text, terminal_progress
from tests.support.terminal import screen


class FakeTerminal(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.fixture(autouse=True)
def _width(monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")
    monkeypatch.setenv("TERM", "xterm-256color")


WRITTEN = ProgressStep("compiling train_step as written at batch 256 for gpu:h100", 1, 2)
ABOUT = ProgressStep("JAX 0.9.2: running the program under memscope", 2, 5, about=True)


@pytest.mark.parametrize("step, seconds, text", [
    (WRITTEN, 12.4, "compiling train_step as written at batch 256 for gpu:h100 "
                    "(1 of 2 done, 12 s)"),
    (ABOUT, None, "JAX 0.9.2: running the program under memscope (2 of about 5 done)"),
    (ProgressStep("compiling step", 3), None, "compiling step (3 done)"),
    (ProgressStep("reading the releases of jax", 0), None, "reading the releases of jax"),
    (ProgressStep("reading the releases of jax", 0), 2.0, "reading the releases of jax (2 s)"),
])
def test_a_step_in_one_line(step, seconds, text):
    assert progress_text(step, seconds) == text


def test_the_live_line_shows_what_is_done_how_far_and_for_how_long():
    out = FakeTerminal()
    with terminal_progress(False, out) as progress:
        assert out.getvalue() == ""  # nothing before the first step
        progress(WRITTEN)
        [shown] = screen(out.getvalue())
        assert re.fullmatch(r". compiling train_step as written at batch 256 for gpu:h100 "
                            r"1 of 2 done, \d+ s", shown), shown
        progress(ABOUT)
        [shown] = screen(out.getvalue())
        assert re.fullmatch(r". JAX 0.9.2: running the program under memscope "
                            r"2 of about 5 done, \d+ s", shown), shown
    assert screen(out.getvalue()) == []  # gone when the block ends


def test_a_long_step_is_cut_and_its_count_kept(monkeypatch):
    monkeypatch.setenv("COLUMNS", "40")
    out = FakeTerminal()
    with terminal_progress(False, out) as progress:
        progress(WRITTEN)
        [shown] = screen(out.getvalue())
    assert len(shown) == 39  # the last column left empty
    assert re.fullmatch(r". compiling train_s\w*… 1 of 2 done, \d+ s", shown), shown


def test_the_line_goes_before_the_block_ends_and_on_an_error():
    out = FakeTerminal()
    with terminal_progress(False, out) as progress:
        progress(WRITTEN)
        progress.end()  # before the answer is printed
        assert screen(out.getvalue()) == []
        progress(ABOUT)  # nothing more is shown
        assert screen(out.getvalue()) == []
    out = FakeTerminal()
    with pytest.raises(KeyboardInterrupt), terminal_progress(False, out) as progress:
        progress(WRITTEN)
        raise KeyboardInterrupt
    assert screen(out.getvalue()) == []


@pytest.mark.parametrize("quiet, terminal, lines", [
    (True, True, None), (True, True, "memscope bisect"), (True, False, "memscope bisect"),
    (False, False, None),
])
def test_quiet_or_not_a_terminal_writes_nothing(quiet, terminal, lines):
    out = FakeTerminal() if terminal else io.StringIO()
    with terminal_progress(quiet, out, lines=lines) as progress:
        progress(WRITTEN)
        progress(ABOUT)
    assert out.getvalue() == ""


def test_off_a_terminal_lines_are_one_plain_line_per_step():
    out = io.StringIO()
    with terminal_progress(False, out, lines="memscope bisect") as progress:
        progress(ProgressStep("reading the releases of jax in 0.9.0..0.10.2 from the package index", 0))
        progress(ABOUT)
    assert out.getvalue() == (
        "memscope bisect: reading the releases of jax in 0.9.0..0.10.2 from the package index\n"
        "memscope bisect: JAX 0.9.2: running the program under memscope (2 of about 5 done)\n")


def test_on_a_terminal_lines_are_the_live_line():
    out = FakeTerminal()
    with terminal_progress(False, out, lines="memscope bisect") as progress:
        progress(ABOUT)
        [shown] = screen(out.getvalue())
    assert "memscope bisect:" not in out.getvalue()
    assert re.fullmatch(r". JAX 0.9.2: running the program under memscope "
                        r"2 of about 5 done, \d+ s", shown), shown
    assert screen(out.getvalue()) == []


def test_steps_from_many_threads_draw_whole_lines():
    out = FakeTerminal()

    def work(n: int) -> None:
        for batch in range(100):
            progress(ProgressStep(f"compiling step with setting {n} at batch {batch} for this machine",
                          batch, 100))

    with terminal_progress(False, out) as progress:
        threads = [threading.Thread(target=work, args=(n,)) for n in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    drawn = [re.sub(r"\x1b\[[?0-9;]*[A-Za-z]", "", frame)
             for frame in re.split(r"\r\x1b\[2K|\r\n?|\n", out.getvalue())]
    drawn = [frame for frame in drawn if frame]
    assert drawn
    for frame in drawn:  # each frame one whole line, none torn by another thread's
        assert re.fullmatch(r". compiling step with setting \d at batch \d+ for this "
                            r"mach(ine|\w*…) \d+ of 100 done, \d+ s", frame), frame
    assert screen(out.getvalue()) == []
