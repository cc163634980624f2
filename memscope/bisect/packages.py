"""The packages a program needs beside JAX, at the versions the user has.

Read without running it: the imports of the program's own files (the script,
or the module ``-m`` names, and the modules beside it that they import, as
written), each mapped to its installed distribution, and memscope's own
dependencies; with what each requires, so that a release's environment is
resolved as close to the user's as that release allows.
"""

from __future__ import annotations

import ast
import importlib.metadata
import json
import os
import re
import sys
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import unquote, urlparse

from memscope.version import DISTRIBUTION

#: never carried: what is bisected, memscope itself (linked from the running
#: installation), and JAX's plugins (memscope installs XLA's compilers itself)
_NOT_CARRIED = re.compile(r"^(jax|jaxlib|jax-memscope|memscope|libtpu.*|jax[-_]cuda.*|jax[-_]rocm.*|"
                          r"jax[-_]plugin.*|pip|setuptools|wheel)$")
#: how many of the program's own files are read for their imports
_FILES = 200


@dataclass(frozen=True)
class Carried:
    """The user's packages to install beside each release: ``versions`` (name ->
    the user's version), and those of them that require JAX (directly or
    through another: their pins are let go first where a release cannot
    resolve them)."""

    versions: dict[str, str]
    need_jax: frozenset[str]
    #: the user's packages installed from a folder, not from the index (a
    #: project installed with ``pip install -e .``): name -> (the folder, whether
    #: editable); installed the same way beside each release, without their
    #: dependencies (those are among ``versions``)
    local: dict[str, tuple[str, bool]] = field(default_factory=dict)


def normal_name(name: str) -> str:
    """A distribution's name as the index compares names (PEP 503)."""
    return re.sub(r"[-_.]+", "-", name).lower()


def _program_files(program: str, module: bool) -> tuple[Path | None, list[Path]]:
    """The program's first file and the folder its own imports are found in."""
    if not module:
        path = Path(program)
        if path.is_dir():
            path = path / "__main__.py"
        return path.parent, [path]
    parts = program.split(".")
    for root in ["", *sys.path]:
        base = Path(root or os.getcwd()).joinpath(*parts)
        for candidate in (base.with_suffix(".py"), base / "__main__.py", base / "__init__.py"):
            if candidate.is_file():
                return Path(root or os.getcwd()), [candidate]
    return None, []


def _imports(path: Path) -> set[str]:
    try:
        tree = ast.parse(path.read_text(encoding="utf-8", errors="replace"))
    except (OSError, SyntaxError, ValueError):
        return set()
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add(node.module)
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
    return found


def imported_modules(program: str, module: bool) -> set[str]:
    """The top-level names of what the program's own files import, its own
    modules (those found beside it) followed into."""
    root, queue = _program_files(program, module)
    if root is None:
        return set()
    seen: set[Path] = set()
    tops: set[str] = set()
    while queue and len(seen) < _FILES:
        path = queue.pop()
        if path in seen:
            continue
        seen.add(path)
        for name in _imports(path):
            parts = name.split(".")
            local = root.joinpath(*parts)
            own = [p for p in (local.with_suffix(".py"), local / "__init__.py") if p.is_file()]
            if own or (root / parts[0]).is_dir() or (root / f"{parts[0]}.py").is_file():
                queue += [p for p in own if p not in seen]
                continue
            tops.add(parts[0])
    return tops - set(sys.stdlib_module_names)


def _requires(distribution: str) -> list[str]:
    """The names ``distribution`` requires unconditionally (extras left out)."""
    try:
        found = importlib.metadata.requires(distribution) or []
    except importlib.metadata.PackageNotFoundError:
        return []
    names = []
    for requirement in found:
        if "extra ==" in requirement.replace("extra==", "extra =="):
            continue
        match = re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)", requirement)
        if match:
            names.append(normal_name(match[1]))
    return names


def _local(distribution: str) -> tuple[str, bool] | None:
    """Where ``distribution`` was installed from, if a folder (``direct_url.json``,
    PEP 610), and whether editable; ``None`` for one from an index."""
    for found in importlib.metadata.distributions(name=distribution):
        text = found.read_text("direct_url.json")
        if not text:
            continue
        try:
            facts = json.loads(text)
        except ValueError:
            continue
        url = facts.get("url", "")
        if "dir_info" in facts and url.startswith("file://"):
            return unquote(urlparse(url).path), bool(facts["dir_info"].get("editable"))
    return None


def _installed(distribution: str) -> str | None:
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return None


def carried(program: str, module: bool, also: Iterable[str] = ()) -> Carried:
    """What to install beside each release of JAX for the program ``program``:
    the distributions of the modules it imports, memscope's own dependencies
    and ``also``, with everything they require, each at the version installed
    here (those not installed left out)."""
    by_module = importlib.metadata.packages_distributions()
    roots = {normal_name(d) for top in imported_modules(program, module) for d in by_module.get(top, ())}
    roots.update(_requires(DISTRIBUTION))
    roots.update(normal_name(a) for a in also)
    versions: dict[str, str] = {}
    local: dict[str, tuple[str, bool]] = {}
    requires: dict[str, list[str]] = {}
    queue = sorted(roots)
    while queue:
        name = queue.pop()
        if name in requires or _NOT_CARRIED.match(name):
            continue
        version = _installed(name)
        if version is None:
            continue
        where = _local(name)
        if where is not None:
            local[name] = where
        else:
            versions[name] = version
        requires[name] = _requires(name)
        queue += requires[name]
    need = {n for n, r in requires.items() if {"jax", "jaxlib"} & set(r)}
    grew = True
    while grew:  # what requires a package that requires JAX requires it too
        more = {n for n, r in requires.items() if n not in need and need & set(r)}
        grew = bool(more)
        need |= more
    return Carried(dict(sorted(versions.items())), frozenset(need & set(versions)),
                   dict(sorted(local.items())))
