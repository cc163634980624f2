"""Leaf paths as users write them (``opt_state[0].mu['w']``: their steps, their
argument, a pattern that selects them) and bounded lists of them ("and N more").
Pure text, no JAX and nothing else of memscope's: the analysis names leaves with
it as the report does."""

from __future__ import annotations

import functools
import re
from collections import defaultdict
from collections.abc import Sequence
from fnmatch import fnmatchcase

#: How many leaves a bounded list names before "and N more".
MAX_LEAVES_LISTED = 5


# --- paths ---------------------------------------------------------------------------

_STEP = re.compile(r"""\[(?:'(?:[^'\\]|\\.)*'|"(?:[^"\\]|\\.)*"|[^\]]*)\]|\.[^.\[]+""")


@functools.lru_cache(maxsize=1 << 16)  # every grouping reads each path's steps again
def path_steps(path: str) -> tuple[str, ...]:
    """``opt_state[0].mu['w']`` -> ``("opt_state", "[0]", ".mu", "['w']")``."""
    head = re.match(r"[^.\[]*", path)
    first = head.group(0) if head else ""
    steps, pos = [first], len(first)
    while pos < len(path):
        m = _STEP.match(path, pos)
        if m is None:  # not a pytree path we can read: keep the rest whole
            steps.append(path[pos:])
            break
        steps.append(m.group(0))
        pos = m.end()
    return tuple(steps)


def argument_of(path: str) -> str:
    """The top-level argument (or result) a leaf belongs to: ``opt_state``."""
    return path_steps(path)[0]


def path_matches(path: str, pattern: str) -> bool:
    """Whether a leaf ``path`` is under ``pattern`` or matches it as a glob
    (``*`` any text, ``?`` one character; brackets are literal)."""
    if path == pattern or (path.startswith(pattern) and path[len(pattern):][:1] in ("[", ".")):
        return True
    if not any(ch in pattern for ch in "*?"):
        return False
    escaped = pattern.replace("[", "[[]")
    return fnmatchcase(path, escaped) or fnmatchcase(path, escaped + "*")


# --- bounded lists -------------------------------------------------------------------


def bounded(items: Sequence[str], limit: int = MAX_LEAVES_LISTED) -> str:
    """``a, b, c and 12 more``: at most ``limit`` items named."""
    if len(items) <= limit:
        return ", ".join(items)
    return f"{', '.join(items[:limit])} and {len(items) - limit} more"


def bounded_leaves(paths: Sequence[str], limit: int = MAX_LEAVES_LISTED) -> str:
    """A few leaves by name, counted by argument (when more than one) when there are
    more than ``limit``: ``134 in params, 269 in opt_state; e.g. params['embed']``.
    """
    if len(paths) <= limit:
        return ", ".join(paths)
    by_arg: dict[str, int] = defaultdict(int)
    for p in paths:
        by_arg[argument_of(p)] += 1
    if len(by_arg) == 1:
        return bounded(list(paths), min(limit, 3))
    # Counted by argument, one leaf is example enough.
    return f"{bounded([f'{n} in {arg}' for arg, n in by_arg.items()], limit)}; e.g. {paths[0]}"


#: Folders of installed packages: a source there is shown from the package on.
_INSTALLED = re.compile(r".*[/\\](?:site|dist)-packages[/\\]")


def from_the_package(source: str) -> str:
    """``optax/_src/base.py:78`` for a ``path:line`` in an installed package's
    folder (``.../site-packages/optax/...``); the source as it is otherwise."""
    return _INSTALLED.sub("", source, count=1)
