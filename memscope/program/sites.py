"""Where in the user's code something happened: the first frame outside given folders.

``memscope fix`` edits the jit call a function was made by and checks the code
that called it; :mod:`memscope.capturing` records both lines with this module
while the program runs, and a hash of the file the jit was made in, so that a
fix never edits a file that changed since.
"""

from __future__ import annotations

import ast
import contextlib
import functools
import hashlib
import inspect
import linecache
import os
import sys
import sysconfig
import types
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from types import FrameType
from typing import Any

#: memscope's own package folder (``.../memscope``): frames there are never the user's.
OWN_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

#: memscope's own folder with a trailing separator, as frame paths are compared.
OWN_FILES = OWN_ROOT + os.sep

#: How far up the stack the user's frame may be (JAX, a framework, memscope).
MAX_FRAMES = 64

#: The names of the user's sources that are no file (a notebook's cells, ``In[3]``),
#: by the path their code was compiled with; set by the front end that runs them.
_source_names: Callable[[str], str | None] | None = None


def name_sources(names: Callable[[str], str | None] | None) -> None:
    """Show each source ``names`` has a name for by that name (``In[3]:5``, not its
    path) and count its frames as the user's, though no file holds it; ``None``:
    no such sources. ``memscope.notebook`` names a kernel's cells this way."""
    global _source_names
    _source_names = names


def source_name(path: str) -> str | None:
    """The name of the source compiled as ``path`` (:func:`name_sources`), or ``None``."""
    if _source_names is None:
        return None
    try:
        return _source_names(path)
    except Exception:  # a front end's lookup must not fail the report
        return None


def installed_roots() -> tuple[str, ...]:
    """The folders of installed packages and the standard library, longest first,
    each ending in a path separator: code there is not the user's own, unless
    the program names it so (:class:`UserCode`)."""
    paths = sysconfig.get_paths()
    roots = {os.path.realpath(paths[k]) for k in ("purelib", "platlib", "stdlib")
             if k in paths}
    return tuple(sorted((r + os.sep for r in roots), key=len, reverse=True))


_INSTALLED = installed_roots()


@dataclass(frozen=True)
class UserCode:
    """Which source files are the program's own: those outside installed packages,
    the standard library and memscope, and, wherever they are installed, the
    files under ``roots``: the package a ``python -m`` program runs from, a script's
    own folder, and packages the user names (``--user-package``). A user's
    installed trainer (``memscope run -m maxtext.trainers.pre_train.train``) is
    then the user's code: its functions get the advice, and its lines are the
    call sites.

    ``roots`` are real paths, each a folder ending in a path separator; the
    longest root that holds a file decides, so a virtual environment inside the
    user's project is still installed code. ``packages`` names the packages
    given, as the user wrote them, for the report.
    """

    roots: tuple[str, ...] = ()
    packages: tuple[str, ...] = ()

    def owns(self, real_path: str) -> bool:
        """Is the file at ``real_path`` (a real path) the user's?"""
        if real_path.startswith(OWN_FILES):
            return False
        installed = max((len(r) for r in _INSTALLED if real_path.startswith(r)), default=-1)
        if installed < 0:
            return True
        return any(len(r) > installed and real_path.startswith(r) for r in self.roots)


def is_installed(real_path: str) -> bool:
    """Is the file at ``real_path`` in an installed package or the standard library
    (whether or not the program counts it as its own)?"""
    return real_path.startswith(_INSTALLED)


#: The program's own code for this process: set by the run (:func:`program_code`).
_code = UserCode()
#: Code objects whose frames end the program's stack: what calls them is memscope's
#: launcher (its console script, click, runpy), never the program's.
_STOPS: set[types.CodeType] = set()


def program_code() -> UserCode:
    """What this process counts as the user's code now (see :class:`UserCode`)."""
    return _code


@contextlib.contextmanager
def as_program_code(code: UserCode) -> Iterator[None]:
    """Within the block, ``code`` says which files are the user's."""
    global _code
    saved, _code = _code, code
    try:
        yield
    finally:
        _code = saved


def stop_at(code: types.CodeType) -> None:
    """Frames of ``code`` (the one that starts the program: the runner) and every
    frame above them are not the program's: a walk up the stack ends there."""
    _STOPS.add(code)


def is_users(path: str) -> bool:
    """Is ``path`` (a frame's ``co_filename``) the user's code? A named source
    (a notebook's cell) and code the program compiled from a string
    (``<string>``) are; frozen modules (the import system, runpy) are not."""
    if source_name(path) is not None:
        return True
    if path.startswith("<"):
        return not path.startswith("<frozen")
    return _code.owns(_realpath(path))


def user_frames(frame: FrameType | None, limit: int | None = MAX_FRAMES
                ) -> Iterator[FrameType]:
    """The frames of the user's code from ``frame`` outwards (innermost first),
    within ``limit`` frames (``None``: all) and below the frame that started
    the program (:func:`stop_at`)."""
    steps = 0
    while frame is not None and frame.f_code not in _STOPS:
        if limit is not None and steps >= limit:
            return
        if is_users(frame.f_code.co_filename):
            yield frame
        frame = frame.f_back
        steps += 1


def user_frame() -> tuple[str, int] | None:
    """``(absolute path, line)`` of the innermost caller in the user's code
    (:func:`is_users`); ``None`` if no frame within :data:`MAX_FRAMES` is, or its
    file is not a real one (``<string>``)."""
    for frame in user_frames(sys._getframe(1)):
        path = frame.f_code.co_filename
        if source_name(path) is not None:  # a notebook's cell: the user's, in no file
            return path, frame.f_lineno
        if path.startswith("<"):  # code from a string: no line to show, look further out
            continue
        real = _realpath(path)
        return (real, frame.f_lineno) if os.path.isfile(real) else None
    return None


@functools.lru_cache(maxsize=4096)
def _realpath(path: str) -> str:
    # A few system calls per frame, for every jit made: once per file is enough.
    return os.path.realpath(path)


def file_sha256(path: str, cache: dict[str, str | None] | None = None) -> str | None:
    """The SHA-256 of the file's bytes, hex; ``None`` if it cannot be read.
    ``cache`` (path -> hash) saves reading a file again within one run."""
    if cache is not None and path in cache:
        return cache[path]
    try:
        with open(path, "rb") as f:
            digest: str | None = hashlib.sha256(f.read()).hexdigest()
    except OSError:
        digest = None
    if cache is not None:
        cache[path] = digest
    return digest


def library(fun: Any) -> str | None:
    """The installed package (``optax``) that defines ``fun``; ``None`` for the
    user's own code (:func:`is_users`). Its jits are the library's: reported,
    never given advice the user cannot apply."""
    code = getattr(inspect.unwrap(base_function(fun)), "__code__", None)
    if code is None:
        return None
    path = _realpath(code.co_filename)
    if _code.owns(path):
        return None
    for root in _INSTALLED:
        if path.startswith(root):
            return path[len(root):].split(os.sep)[0].removesuffix(".py")
    return None


def base_function(fun: Any) -> Any:
    while isinstance(fun, functools.partial):
        fun = fun.func
    return fun


def definition(fun: Any) -> tuple[str, str | None]:
    """The user's name for ``fun`` and where it is defined, as ``path:line``.

    The line is the ``def`` line, not a decorator's; the path is relative to the
    working directory when under it.
    """
    base = inspect.unwrap(base_function(fun))
    name = getattr(base, "__name__", None) or type(base).__name__
    code = getattr(base, "__code__", None)
    if code is None:
        return name, None
    path = code.co_filename
    return name, f"{display_path(path)}:{_def_line(path, code.co_firstlineno)}"


def _def_line(path: str, line: int) -> int:
    """The ``def`` line of a function whose code starts at ``line`` (its first
    decorator's, where it has any)."""
    if linecache.getline(path, line).lstrip().startswith("@"):
        for candidate in range(line + 1, line + 50):  # skip decorators to the def line
            text = linecache.getline(path, candidate).lstrip()
            if text.startswith(("def ", "async def ")):
                return candidate
    return line


def jit_caller(skip: tuple[str, ...]) -> tuple[str, int] | None:
    """``(path, line)`` of the code calling the jit constructor now, where it is
    the user's (:func:`is_users`): the first frame outside memscope and the
    packages ``skip`` (JAX's). ``None`` where that frame is an installed
    package's (the package's own jit), or code from a string."""
    frame: FrameType | None = sys._getframe(1)
    for _ in range(MAX_FRAMES):
        if frame is None or frame.f_code in _STOPS:
            return None
        path = frame.f_code.co_filename
        module = str(frame.f_globals.get("__name__", "")).split(".")[0]
        if not path.startswith(OWN_FILES) and module not in skip:
            break
        frame = frame.f_back
    else:
        return None
    if frame is None or not is_users(path):
        return None
    if source_name(path) is not None:  # a notebook's cell
        return path, frame.f_lineno
    if path.startswith("<"):
        return None
    real = _realpath(path)
    return (real, frame.f_lineno) if os.path.isfile(real) else None


def jitted_name(where: tuple[str, int]) -> str | None:
    """The function a ``jax.jit(...)`` call at ``where`` jits, as the user spelled
    it, where it is a dotted name (``model.apply`` in ``jax.jit(model.apply,
    static_argnums=3)`` or ``partial(jax.jit, ...)(model.apply)``); ``None``
    otherwise (a decorator, an expression, an unreadable file)."""
    tree = _syntax(where[0])
    if tree is None:
        return None
    line = where[1]
    calls = [n for n in ast.walk(tree) if isinstance(n, ast.Call) and n.args
             and n.lineno <= line <= (n.end_lineno or n.lineno) and _is_jit(n.func)]
    if not calls:
        return None
    jitted = min(calls, key=lambda n: (n.end_lineno or n.lineno) - n.lineno).args[0]
    if not isinstance(jitted, ast.Name | ast.Attribute):
        return None
    node: ast.AST = jitted
    while isinstance(node, ast.Attribute):
        node = node.value
    return ast.unparse(jitted) if isinstance(node, ast.Name) else None


def _is_jit(func: ast.AST) -> bool:
    """``jax.jit``, ``jit``, ``pjit``, or ``functools.partial(jax.jit, ...)``."""
    if isinstance(func, ast.Call) and func.args and ast.unparse(func.func).endswith("partial"):
        func = func.args[0]
    return isinstance(func, ast.Name | ast.Attribute) and ast.unparse(func).endswith("jit")


def site_text(where: tuple[str, int]) -> str:
    return f"{display_path(where[0])}:{where[1]}"


def display_path(path: str) -> str:
    """``path`` relative to the working directory when it lies under it; a named
    source by its name (:func:`name_sources`)."""
    named = source_name(path)
    if named is not None:
        return named
    try:
        rel = os.path.relpath(path)
    except ValueError:
        return path
    return path if rel.startswith(os.pardir) else rel


def without_own_frames(tb: types.TracebackType | None) -> types.TracebackType | None:
    """``tb`` less memscope's own frames (python shows none of its machinery either)."""
    kept = []
    while tb is not None:
        if not tb.tb_frame.f_code.co_filename.startswith(OWN_FILES):
            kept.append(tb)
        tb = tb.tb_next
    result = None
    for entry in reversed(kept):
        result = types.TracebackType(result, entry.tb_frame, entry.tb_lasti, entry.tb_lineno)
    return result


def assigned_line(path: str, first_line: int, name: str, before: int) -> int | None:
    """The last line before ``before`` (0: anywhere) that assigns ``name`` (``x``,
    ``self.data``) in the function defined at ``first_line`` of ``path`` (0 or 1
    with no enclosing function: the module's own statements); ``None`` if no
    statement there does, or the file cannot be read."""
    tree = _syntax(path)
    if tree is None:
        return None
    scope: ast.AST = tree
    if first_line > 1:
        scope = next((n for n in ast.walk(tree)
                      if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)
                      and min([n.lineno, *(d.lineno for d in n.decorator_list)]) == first_line),
                     tree)
    lines = [line for n in _own_statements(scope)
             if (line := getattr(n, "lineno", None)) is not None and name in _targets(n)
             and (not before or line <= before)]
    return max(lines, default=None)


@functools.lru_cache(maxsize=64)
def _syntax(path: str) -> ast.Module | None:
    try:
        try:
            with open(path, encoding="utf-8") as f:
                text = f.read()
        except OSError:  # a notebook's cell is in linecache only
            text = "".join(linecache.getlines(path))
            if not text:
                raise
        return ast.parse(text, path)
    except (OSError, SyntaxError, ValueError):
        return None


def _own_statements(scope: ast.AST) -> list[ast.AST]:
    """The nodes of ``scope``, not those of functions and classes nested in it."""
    out: list[ast.AST] = []
    todo = list(ast.iter_child_nodes(scope))
    while todo:
        node = todo.pop()
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef | ast.Lambda):
            continue
        out.append(node)
        todo.extend(ast.iter_child_nodes(node))
    return out


def _targets(node: ast.AST) -> set[str]:
    """The names (as spelled: ``x``, ``self.data``) a statement assigns."""
    targets: list[ast.AST] = []
    if isinstance(node, ast.Assign):
        targets = list(node.targets)
    elif isinstance(node, ast.AnnAssign | ast.AugAssign | ast.For | ast.AsyncFor | ast.NamedExpr):
        targets = [node.target]
    elif isinstance(node, ast.With | ast.AsyncWith):
        targets = [i.optional_vars for i in node.items if i.optional_vars is not None]
    names = set()
    while targets:
        t = targets.pop()
        if isinstance(t, ast.Tuple | ast.List):
            targets.extend(t.elts)
        elif isinstance(t, ast.Starred):
            targets.append(t.value)
        elif isinstance(t, ast.Name | ast.Attribute):
            names.add(ast.unparse(t))
    return names
