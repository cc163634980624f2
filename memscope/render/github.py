"""A check as GitHub Actions workflow commands: ``::error file=...,line=...::`` annotations."""

from __future__ import annotations

from typing import IO

from memscope.check.records import CheckResult
from memscope.render._check_text import environment_note, function_label
from memscope.render.text import visible

#: GitHub shows at most 10 error annotations per step; memscope writes no more.
MAX_ANNOTATIONS = 10


def render_check_annotations(result: CheckResult, file: IO[str]) -> None:
    """One ``::error`` per failing function at its definition, at most :data:`MAX_ANNOTATIONS`.

    An environment that differs is a ``::warning`` (an ``::error`` under ``--strict-env``);
    a check that compared nothing with its baseline is an ``::error``.
    """
    lines = []
    if result.environment:
        kind = "error" if result.environment_failed else "warning"
        lines.append(f"::{kind} title=memscope check::{_data(environment_note(result))}")
    if result.empty_failed:
        lines.append(f"::error title=memscope check::{_data(str(result.nothing_compared))}")
    for fn in result.functions:
        if not fn.failed:
            continue
        props = []
        if fn.file is not None:
            props.append(f"file={_property(fn.file)}")
        if fn.line is not None:
            props.append(f"line={fn.line}")
        props.append(f"title={_property(visible(f'memscope check: {fn.name}'))}")
        name = function_label(fn) + (f" [{fn.paired_by}]" if fn.paired_by else "")
        message = f"{visible(name)}: " + "\n".join(visible(p) for p in fn.problems)
        lines.append(f"::error {','.join(props)}::{_data(message)}")
    for line in lines[:MAX_ANNOTATIONS]:
        file.write(line + "\n")


def _data(text: str) -> str:
    # The escapes of GitHub's toolkit (core/command.ts escapeData); the message's own
    # line breaks are meant, any other control character is shown.
    text = "\n".join(visible(line) for line in text.split("\n"))
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def _property(text: str) -> str:
    return _data(text).replace(":", "%3A").replace(",", "%2C")
