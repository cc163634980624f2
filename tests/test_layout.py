"""The layout: data flows one way through memscope's folders (docs/how-it-works.md).

Read from the source with ``ast``, not by importing: every ``import`` between
memscope modules counts, at module level and inside functions alike (an import
deferred to call time is still a dependency), with ``from memscope.x import y``
resolved to the module ``memscope.x.y`` where ``y`` is one, else to ``memscope.x``.
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
import re
import types
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "memscope"
#: A module longer than this says why in its docstring (STYLE: one reason to change).
MAX_LINES = 600


def _modules() -> dict[str, Path]:
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        found[".".join(parts)] = path
    return found


MODULES = _modules()


def _imports(name: str, path: Path) -> set[str]:
    """The memscope modules ``name`` imports, anywhere in its source."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[:len(package.split(".")) - node.level + 1]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            for alias in node.names:
                submodule = f"{module}.{alias.name}"
                found.add(submodule if submodule in MODULES else module)
    return {m for m in found if m in MODULES and m != name}


GRAPH = {name: _imports(name, path) for name, path in MODULES.items()}


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_the_graph_is_read():
    # The reader sees both spellings and imports inside functions.
    assert "memscope.capturing.jit" in GRAPH["memscope.capturing.recorder"]
    assert "memscope._compat" in GRAPH["memscope.capturing.jit"]
    assert "memscope.capturing.aot" in GRAPH["memscope.capturing.jit"]  # imported when used
    assert "memscope.capturing" in GRAPH["memscope.flow"]  # the package's __init__


def test_no_import_circle():
    assert _cycles(GRAPH) == []


def test_the_cycle_finder_finds_one():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def _under(prefixes: tuple[str, ...], name: str) -> bool:
    return any(name == p or name.startswith(p + ".") for p in prefixes)


#: What each stage must not import: a later stage, or one beside it that it does
#: not need. capture schedules the variants; the variants know nothing of capture.
FORBIDDEN = {
    "memscope.report": ("memscope.program", "memscope.capturing", "memscope.compiled",
                        "memscope.variants", "memscope.analysis", "memscope.assemble",
                        "memscope.flow", "memscope._compat", "memscope._frameworks",
                        "memscope._versions", "memscope.cli", "memscope.render",
                        "memscope.check", "memscope.fix", "memscope.notebook",
                        "memscope.pytest_plugin"),
    "memscope.program": ("memscope.capturing", "memscope.compiled", "memscope.variants",
                         "memscope.analysis", "memscope.flow", "memscope.cli",
                         "memscope.render", "memscope.check", "memscope.fix"),
    "memscope.compiled": ("memscope.capturing", "memscope.variants", "memscope.analysis",
                          "memscope.assemble", "memscope.flow", "memscope.program",
                          "memscope.cli", "memscope.render", "memscope.check", "memscope.fix"),
    "memscope.analysis": ("memscope.capturing", "memscope.variants", "memscope.program",
                          "memscope.assemble", "memscope.flow", "memscope.cli",
                          "memscope.render", "memscope.check", "memscope.fix"),
    "memscope.variants": ("memscope.capturing", "memscope.assemble", "memscope.flow",
                          "memscope.cli", "memscope.render", "memscope.check", "memscope.fix"),
    "memscope.capturing": ("memscope.assemble", "memscope.flow", "memscope.cli",
                         "memscope.render", "memscope.check", "memscope.fix"),
    "memscope.assemble": ("memscope.flow", "memscope.cli", "memscope.render",
                          "memscope.check", "memscope.fix"),
    "memscope.render": ("memscope.capturing", "memscope.compiled", "memscope.variants",
                        "memscope.analysis", "memscope.program", "memscope.flow",
                        "memscope.assemble",
                        "memscope._compat", "memscope.cli"),
    "memscope.check": ("memscope.capturing", "memscope.compiled", "memscope.variants",
                       "memscope.analysis", "memscope.flow", "memscope.assemble", "memscope._compat",
                       "memscope.cli", "memscope.render"),
}


@pytest.mark.parametrize("stage", sorted(FORBIDDEN))
def test_a_stage_imports_no_later_one(stage):
    wrong = sorted(f"{name} -> {target}" for name, targets in GRAPH.items()
                   if _under((stage,), name)
                   for target in targets if _under(FORBIDDEN[stage], target))
    assert wrong == []


def test_the_report_records_import_no_stage():
    records = ("memscope.report.memory", "memscope.report.function", "memscope.report.run",
               "memscope.report.decode", "memscope.report.files", "memscope.report.units")
    allowed = ("memscope.report", "memscope.errors")
    wrong = sorted(f"{name} -> {target}" for name in records for target in GRAPH[name]
                   if not _under(allowed, target))
    assert wrong == []


#: No function longer than this (STYLE: a function fits on a screen).
MAX_FUNCTION_LINES = 80


def test_no_function_is_longer_than_a_screen():
    long = []
    for name, path in MODULES.items():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                lines = node.end_lineno - node.lineno + 1
                if lines > MAX_FUNCTION_LINES:
                    long.append(f"{name}.{node.name}: {lines} lines")
    assert long == []


#: The calls that make an XLA compile, and the modules that may make them: one
#: cached call (memscope.compiled.compile.compile_to_read) for everything memscope
#: only reads, each target's own compile under it, and the program's own compile
#: of a compile-only analysis (capturing.jit, as JAX compiles the call) and of the
#: user's own ahead-of-time compile (capturing.aot's stand-in for ``Lowered.compile``).
COMPILE_CALLS = {"compile", "_compile", "compile_uncached", "compile_dumped"}
MAY_COMPILE = {"memscope.compiled.compile", "memscope.compiled.dump", "memscope.compiled.read",
               "memscope.compiled.targets.base", "memscope.compiled.targets.here",
               "memscope.compiled.targets.gpu", "memscope.compiled.raw", "memscope.capturing.jit",
               "memscope.capturing.aot"}


def _compile_calls(path: Path) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Call):
            func = node.func
            # (a bare ``compile(...)`` is Python's own, of source code)
            name = (func.attr if isinstance(func, ast.Attribute)
                    else func.id if isinstance(func, ast.Name) and func.id != "compile"
                    else None)
            regex = (isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name)
                     and func.value.id == "re")
            if name in COMPILE_CALLS and not regex:
                found.append(f"{name} at line {node.lineno}")
    return found


def test_everything_memscope_only_reads_compiles_through_the_one_cached_call():
    stray = {name: calls for name, path in MODULES.items()
             if name not in MAY_COMPILE and (calls := _compile_calls(path))}
    assert stray == {}


def test_the_compile_rule_sees_a_compile():
    assert _compile_calls(MODULES["memscope.compiled.compile"])  # target.compile(...)
    assert not _compile_calls(MODULES["memscope.variants.fit"])


def test_a_long_module_says_why():
    long = []
    for name, path in MODULES.items():
        text = path.read_text(encoding="utf-8")
        docstring = ast.get_docstring(ast.parse(text)) or ""
        if text.count("\n") > MAX_LINES and str(MAX_LINES) not in docstring:
            long.append(name)
    assert long == []


def test_the_public_names_stay_functions_after_every_module_is_imported() -> None:
    # A submodule named like a public function would replace it on the package
    # once imported (``memscope.capture`` the module, not the function).
    import memscope

    # memscope.notebook imports IPython, which is no dependency of memscope.
    without_ipython = importlib.util.find_spec("IPython") is None
    for module in GRAPH:
        # __main__ runs the command line
        if not (module.endswith("__main__")
                or (module == "memscope.notebook" and without_ipython)):
            importlib.import_module(module)
    assert all(callable(getattr(memscope, name)) and not isinstance(
        getattr(memscope, name), types.ModuleType)
        for name in ("capture", "analyze", "build_report", "load_report"))
    with memscope.capture() as session:
        pass
    assert session.entries == []
    if without_ipython:
        pytest.skip("IPython is not installed: every module was imported but "
                    "memscope.notebook, which imports it")


# ------------------------------------------------- private JAX and frameworks --

#: The frameworks whose internals memscope reads, only in memscope._frameworks.
FRAMEWORKS = ("equinox", "flax")


def _imported_modules(path: Path) -> list[tuple[str, int]]:
    """Every module an ``import`` in ``path`` names (``from a import b``: ``a``
    and ``a.b``), with its line."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found += [(a.name, node.lineno) for a in node.names]
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            found.append((node.module, node.lineno))
            found += [(f"{node.module}.{a.name}", node.lineno) for a in node.names]
    return found


def test_no_module_imports_jax_src():
    # JAX's private modules are read through memscope._compat's guard
    # (``_private``), so that memscope imports on a JAX that moved one.
    bare = sorted(f"{name}:{line} imports {module}" for name, path in MODULES.items()
                  for module, line in _imported_modules(path)
                  if _under(("jax._src",), module))
    assert bare == []


def test_the_rule_for_jax_src_sees_an_import(tmp_path):
    source = tmp_path / "m.py"
    source.write_text("from jax._src import core\nfrom jax import _src\nimport jax._src.api\n")
    assert [m for m, _ in _imported_modules(source) if _under(("jax._src",), m)] == [
        "jax._src", "jax._src.core", "jax._src", "jax._src.api"]


def test_compat_is_modules_within_the_size_limit():
    # memscope._compat is JAX's differences and private reads only: one
    # module per concern, none over the limit (no docstring excuses one).
    modules = {name: path for name, path in MODULES.items()
               if _under(("memscope._compat",), name)}
    assert len(modules) > 1  # a package
    long = sorted(name for name, path in modules.items()
                  if path.read_text(encoding="utf-8").count("\n") > MAX_LINES)
    assert long == []


def _names_a_framework_module(path: Path) -> list[str]:
    """Framework modules ``path`` imports, or names as a string (``sys.modules``'
    keys: ``"flax.nnx.graph"``)."""
    found = [m for m, _ in _imported_modules(path) if _under(FRAMEWORKS, m)]
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) \
                and re.fullmatch(r"(equinox|flax)(\.\w+)+", node.value):
            found.append(node.value)
    return found


def test_only_frameworks_reads_framework_internals():
    elsewhere = {name: found for name, path in MODULES.items()
                 if name != "memscope._frameworks"
                 and (found := _names_a_framework_module(path))}
    assert elsewhere == {}
    assert _names_a_framework_module(MODULES["memscope._frameworks"])  # the rule sees them
