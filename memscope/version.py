"""memscope's version and distribution name: the one place the version is written
(pyproject.toml reads it; the name is static there, and a test keeps the two alike).

A constant rather than ``importlib.metadata.version(...)``: asking the installed
metadata scans every distribution on ``sys.path``, about 30 ms of every
``memscope run`` before the program starts. Only ``--version`` asks it, for
:func:`sharing_the_import_name`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from importlib import metadata

__version__ = "0.1.0"

#: memscope's name on the package index: ``pip install jax-memscope``. The import
#: package and the command are ``memscope``; the index's ``memscope`` is another
#: project's (a C/C++ memory simulator), whose import package is ``memscope`` too.
DISTRIBUTION = "jax-memscope"


def sharing_the_import_name() -> list[str]:
    """The other installed distributions that write files into ``memscope/``.

    Two distributions with one import package overwrite each other's files, and
    uninstalling either deletes the files both wrote, so ``import memscope`` may
    load parts of each. Each entry is ``"NAME VERSION (SUMMARY)"``: the index's
    ``memscope``, or this project installed under its former name ``memscope``
    (from a clone, before it was renamed). Empty when there is none.
    """
    from importlib import metadata

    found = []
    for dist in metadata.distributions():
        name = dist.metadata["Name"] or ""
        if _normalized(name) == _normalized(DISTRIBUTION):
            continue
        if _normalized(name) == "memscope" or "memscope" in _top_level(dist):
            summary = dist.metadata["Summary"] or "no summary"
            found.append(f"{name} {dist.version} ({summary})")
    return sorted(set(found))


def _normalized(name: str) -> str:
    """A distribution name as the index compares them (PEP 503)."""
    import re

    return re.sub(r"[-_.]+", "-", name).lower()


def _top_level(dist: metadata.Distribution) -> set[str]:
    """The import packages ``dist`` installs: its files' first folders and its top_level.txt."""
    tops = {str(f).split("/", 1)[0] for f in dist.files or [] if "/" in str(f)}
    text = dist.read_text("top_level.txt")
    if text:
        tops.update(line.strip() for line in text.splitlines() if line.strip())
    return tops
