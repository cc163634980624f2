"""The test suite's own layout: no test module imports another; each is on the map.

What two test modules share (helpers, hand-built records, JAX's own figures)
lives in ``tests/support/``; a test module imports from there, so moving,
renaming or deleting one test module never breaks another. Read from the source
with ``ast``, imports inside functions included.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

TESTS = Path(__file__).resolve().parent
#: every module of the suite that is not a program it runs (tests/programs) or data
SUITE = sorted([*TESTS.glob("*.py"), *(TESTS / "support").glob("*.py")])
TEST_MODULES = {path.stem for path in TESTS.glob("test_*.py")}


def _imported(tree: ast.AST, package: str) -> list[tuple[int, str]]:
    """(line, module) of every import in ``tree``; ``from m import n`` counts
    both ``m`` and ``m.n`` (``n`` may be a module)."""
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            module = node.module or ""
            if node.level:
                base = package.split(".")[:max(0, package.count(".") + 2 - node.level)]
                module = ".".join([*base, *([module] if module else [])])
            found.append((node.lineno, module))
            found += [(node.lineno, f"{module}.{alias.name}") for alias in node.names]
    return found


def _is_test_module(name: str) -> bool:
    parts = name.split(".")
    if parts[0] == "tests":
        parts = parts[1:]
    # ``tests.test_x`` and, where tests/ is on sys.path, a bare ``test_x``
    return len(parts) >= 1 and parts[0] in TEST_MODULES


def imports_of_test_modules(source: str, package: str = "tests") -> list[tuple[int, str]]:
    """(line, module) of each import of a test module in ``source``, a module of
    ``package``."""
    return sorted((line, name) for line, name in _imported(ast.parse(source), package)
                  if _is_test_module(name))


def test_no_test_module_imports_another():
    found = {}
    for path in SUITE:
        package = "tests.support" if path.parent.name == "support" else "tests"
        imports = imports_of_test_modules(path.read_text(encoding="utf-8"), package)
        if imports:
            found[str(path.relative_to(TESTS.parent))] = imports
    assert found == {}, (
        "a test module imports another: move what they share into tests/support/")


def test_the_reader_sees_every_spelling():
    source = (
        "import tests.test_report\n"
        "from tests.test_samples import MEMSCOPE\n"
        "from tests import test_report as r\n"
        "from .test_early import update\n"
        "def f():\n"
        "    from tests.test_advice import step\n"
        "from tests.support.cli import invoke\n"
        "import jax\n")
    assert imports_of_test_modules(source) == [
        (1, "tests.test_report"), (2, "tests.test_samples"), (2, "tests.test_samples.MEMSCOPE"),
        (3, "tests.test_report"), (4, "tests.test_early"), (4, "tests.test_early.update"),
        (6, "tests.test_advice"), (6, "tests.test_advice.step")]
    assert imports_of_test_modules("from . import test_report", "tests.support") == []
    assert imports_of_test_modules("from .. import test_report", "tests.support") == [
        (1, "tests.test_report")]


def test_the_support_modules_are_not_collected():
    # pytest collects test_*.py: the helpers' modules are named otherwise
    assert not [p.name for p in (TESTS / "support").glob("*.py") if p.name.startswith("test_")]


def test_every_test_module_is_on_the_map():
    """tests/README.md groups the test modules by stage: a new one is added there."""
    mapped = set(re.findall(r"`(test_\w+)\.py`", (TESTS / "README.md").read_text(encoding="utf-8")))
    assert sorted(TEST_MODULES - mapped) == [], "add it to tests/README.md's map"
    assert sorted(mapped - TEST_MODULES) == [], "tests/README.md names a module that is gone"
