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
    assert "memscope.capturing.aot" in GRAPH["memscope.capturing.calls"]  # imported when used
    assert "memscope.capturing" in GRAPH["memscope.flow"]  # the package's __init__


def test_no_import_circle():
    assert _cycles(GRAPH) == []


def test_the_cycle_finder_finds_one():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def _under(prefixes: tuple[str, ...], name: str) -> bool:
    return any(name == p or name.startswith(p + ".") for p in prefixes)


#: The stages in the order data flows, as docs/how-it-works.md's map lists them:
#: a stage imports only stages before it (and of those only what ALLOWED says).
#: "memscope" is the package's own __init__ (the public API), a face like cli.
ORDER = ("memscope._versions", "memscope._python", "memscope.errors", "memscope.version",
         "memscope.progress", "memscope._compat", "memscope._frameworks", "memscope.report",
         "memscope.program", "memscope.compiled", "memscope.analysis", "memscope.variants",
         "memscope.capturing", "memscope.assemble", "memscope.flow", "memscope.views",
         "memscope.check", "memscope.fix", "memscope.bisect", "memscope.render",
         "memscope.options", "memscope.notebook", "memscope.pytest_plugin", "memscope.cli", "memscope",
         "memscope.__main__")

_BASE = ("memscope.errors",)
_JAX = ("memscope._compat", "memscope._frameworks", "memscope._versions", "memscope._python")
_CAPTURE = ("memscope.report", "memscope.program", "memscope.compiled", "memscope.analysis",
            "memscope.variants", "memscope.capturing", "memscope.progress", "memscope.version")

#: What each stage may import, besides itself: every module belongs to one stage
#: (test_every_module_has_a_stage). capture schedules the variants; the variants
#: know nothing of capture. The reader's views read records only; the renderers
#: draw records and views, and never reach back into capture or compiling.
ALLOWED: dict[str, tuple[str, ...]] = {
    "memscope._versions": (),
    "memscope._python": (),
    "memscope.errors": (),
    "memscope.version": (),
    "memscope.progress": (),
    "memscope._compat": ("memscope._versions",),
    "memscope._frameworks": (),
    "memscope.report": _BASE,
    "memscope.program": (*_BASE, "memscope.report"),
    "memscope.compiled": (*_BASE, "memscope._compat", "memscope._frameworks", "memscope.report",
                          "memscope.version"),
    "memscope.analysis": (*_BASE, "memscope.report", "memscope.compiled"),
    "memscope.variants": (*_BASE, *_JAX, "memscope.report", "memscope.program",
                          "memscope.compiled", "memscope.analysis", "memscope.progress"),
    "memscope.capturing": (*_BASE, *_JAX, *_CAPTURE),
    "memscope.assemble": (*_BASE, *_JAX, *_CAPTURE),
    "memscope.flow": (*_BASE, *_JAX, *_CAPTURE, "memscope.assemble"),
    "memscope.views": (*_BASE, "memscope.report"),
    "memscope.check": (*_BASE, "memscope.report", "memscope.views"),
    "memscope.fix": (*_BASE, "memscope.report", "memscope.program", "memscope.compiled",
                     "memscope.analysis"),
    "memscope.bisect": (*_BASE, "memscope._versions", *_CAPTURE, "memscope.flow",
                        "memscope.check"),
    "memscope.render": (*_BASE, "memscope.report", "memscope.views", "memscope.check",
                        "memscope.fix", "memscope.bisect", "memscope.progress"),
    "memscope.options": (*_BASE, "memscope.analysis"),
    "memscope.notebook": (*_BASE, *_CAPTURE, "memscope.flow", "memscope.render",
                          "memscope.options"),
    "memscope.pytest_plugin": (*_BASE, *_JAX, *_CAPTURE, "memscope.assemble", "memscope.flow",
                               "memscope.views", "memscope.check", "memscope.render"),
    "memscope.cli": (*_BASE, *_JAX, *_CAPTURE, "memscope.flow", "memscope.views", "memscope.options",
                     "memscope.check", "memscope.fix", "memscope.bisect", "memscope.render"),
    "memscope": (*_BASE, "memscope.version", "memscope.report", "memscope.render",
                 "memscope.notebook"),
    "memscope.__main__": ("memscope.cli",),
}


def _stage(name: str) -> str | None:
    """The stage ``name`` belongs to: the longest one it is, or is under."""
    found = [s for s in ORDER if s != "memscope" and _under((s,), name)]
    return max(found, key=len) if found else "memscope" if name == "memscope" else None


def test_every_module_has_a_stage():
    assert sorted(ALLOWED) == sorted(ORDER)
    assert [name for name in MODULES if _stage(name) is None] == []


def test_a_stage_imports_only_what_it_may():
    wrong = sorted(f"{name} -> {target}" for name, targets in GRAPH.items()
                   for target in targets
                   if (stage := _stage(name)) != _stage(target)
                   and not _under(ALLOWED[stage], target))
    assert wrong == []


def test_a_stage_may_import_only_earlier_stages():
    later = {stage: [a for a in allowed if ORDER.index(a) > ORDER.index(stage)]
             for stage, allowed in ALLOWED.items()}
    assert {stage: found for stage, found in later.items() if found} == {}


def _map_order() -> list[str]:
    """The stages docs/how-it-works.md's map lists, in its order."""
    text = (ROOT / "docs" / "how-it-works.md").read_text(encoding="utf-8")
    block = text.split("    memscope/\n", 1)[1].split("\n\n", 1)[0]
    names = []
    for line in block.splitlines():
        if line.startswith("      ") and not line.startswith("       "):
            first = line.split()[0]
            names.append("memscope" if first == "__init__.py"
                         else "memscope." + first.removesuffix("/").removesuffix(".py"))
    return names


def test_the_map_in_the_docs_lists_the_stages_in_the_codes_order():
    assert _map_order() == list(ORDER)


#: The reader's views, away from the records: the records import none of them,
#: and only the faces and the judging import the views.
VIEW_READERS = ("memscope.views", "memscope.render", "memscope.check", "memscope.cli",
                "memscope.pytest_plugin")


def test_only_the_faces_read_the_views():
    wrong = sorted(f"{name} -> {target}" for name, targets in GRAPH.items()
                   for target in targets
                   if _under(("memscope.views",), target) and not _under(VIEW_READERS, name))
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
#: of a compile-only analysis (capturing.calls, as JAX compiles the call) and of the
#: user's own ahead-of-time compile (capturing.aot's stand-in for ``Lowered.compile``).
COMPILE_CALLS = {"compile", "_compile", "compile_uncached", "compile_dumped"}
MAY_COMPILE = {"memscope.compiled.compile", "memscope.compiled.dump", "memscope.compiled.read",
               "memscope.compiled.targets.base", "memscope.compiled.targets.here",
               "memscope.compiled.targets.gpu", "memscope.compiled.raw", "memscope.capturing.calls",
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


#: The house's limit for memscope/_compat as a whole, in lines: each function
#: left there is a private read of JAX's or a difference between JAX versions,
#: the logic over them lives with the stage that uses it. A new private read or
#: version difference may raise it; logic moved in may not.
MAX_COMPAT_LINES = 1500


def test_compat_is_within_the_house_limit():
    lines = sum(path.read_text(encoding="utf-8").count("\n")
                for name, path in MODULES.items() if _under(("memscope._compat",), name))
    assert lines <= MAX_COMPAT_LINES


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
