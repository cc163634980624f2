"""Write a donation into the call that made a jit, keeping the file's own text.

Pure text in, text out, through libcst's concrete syntax tree, so comments,
quotes, line breaks and trailing commas stay as the user wrote them; only the
donation keywords change. No JAX here.

The spellings handled, each edited in its own terms:

* ``@jax.jit`` (or ``@jit``) becomes ``@partial(jax.jit, donate_argnames=...)``
  (JAX 0.7 has no ``jax.jit(**options)`` decorator factory), importing
  ``partial`` from functools where the file has no name for it;
* ``@partial(jax.jit, ...)``, ``@functools.partial(jax.jit, ...)``,
  ``f = jax.jit(g, ...)`` and ``@jax.jit(...)``: the keyword is added or changed;
* ``@eqx.filter_jit`` / ``eqx.filter_jit(g, donate=...)``: ``donate=...``;
* ``@nnx.jit`` / ``nnx.jit(g, ...)``: nnx.jit's own ``donate_arg*`` keywords.
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

import libcst as cst
from libcst.metadata import MetadataWrapper, PositionProvider

from memscope.errors import EXIT_FIX_REFUSED, MemscopeError

JitKind = Literal["jax", "equinox", "nnx"]

#: The keywords through which each spelling donates.
DONATION_KEYWORDS: dict[JitKind, tuple[str, ...]] = {
    "jax": ("donate_argnums", "donate_argnames"),
    "nnx": ("donate_argnums", "donate_argnames"),
    "equinox": ("donate",),
}


class FixRefused(MemscopeError):
    """An edit memscope will not make; the message is the one-line reason."""

    exit_code = EXIT_FIX_REFUSED


@dataclass(frozen=True)
class Donate:
    """A donation to write: keyword -> Python source of its value, in a framework's terms."""

    framework: JitKind
    keywords: tuple[tuple[str, str], ...]


@dataclass(frozen=True)
class EditRequest:
    """Write ``donate`` into the jit made at ``line`` for the function ``function``."""

    line: int
    function: str
    donate: Donate


def parse_setting(setting: str) -> Donate:
    """The advice's setting (``donate_argnames=("params",)``,
    ``eqx.filter_jit(donate="all")``, ``nnx.jit(donate_argnums=(0,))``) as keywords.

    Raises:
        FixRefused: the setting is not one a program can say (the advisor wrote
            prose because the wrapper cannot donate exactly that).
    """
    text = setting.strip()
    framework: JitKind = "jax"
    if text.startswith("eqx.filter_jit("):
        framework, text = "equinox", text[len("eqx.filter_jit("):-1]
    elif text.startswith("nnx.jit("):
        framework, text = "nnx", text[len("nnx.jit("):-1]
    try:
        source = f"_({text})"
        call = ast.parse(source, mode="eval").body
        assert isinstance(call, ast.Call) and not call.args
        keywords = []
        for k in call.keywords:
            assert k.arg in DONATION_KEYWORDS[framework]
            ast.literal_eval(k.value)
            # the advice's own text: the quotes and spacing JAX's docs use
            keywords.append((k.arg, ast.get_source_segment(source, k.value) or ""))
    except (SyntaxError, AssertionError, ValueError):
        raise FixRefused(f"the advice is not a setting a program can write: {setting}") from None
    return Donate(framework, tuple(keywords))


def edit_source(text: str, requests: Sequence[EditRequest], *, path: str) -> str:
    """``text`` with each request's donation written into its jit call.

    All or nothing: every request must find its call, or nothing is edited.

    Raises:
        FixRefused: a request's jit call cannot be found at its line, is built
            dynamically (``**options``, a donation held in a variable, a jit of a
            function passed in), or jits another function than the request's.
    """
    try:
        module = cst.parse_module(text)
    except cst.ParserSyntaxError as e:
        raise FixRefused(f"{path} does not parse: {e.message}") from None
    wrapper = MetadataWrapper(module)
    finder = _Finder(requests, wrapper.resolve(PositionProvider))
    wrapper.visit(finder)
    targets: dict[cst.CSTNode, cst.CSTNode] = {}
    needs_partial = False
    for request in requests:
        found = finder.found.get(request.line)
        if found is None:
            raise FixRefused(f"{request.function}: {path}:{request.line}: no jit call or "
                             f"decorator of {request.function} found on that line")
        try:
            node, edited, partial_needed = _edit(found, request, path)
        except FixRefused as e:
            raise FixRefused(f"{request.function}: {e}") from None
        if node in targets and targets[node].deep_equals(edited) is False:
            raise FixRefused(f"{request.function}: {path}:{request.line}: two functions "
                             "jitted by one call "
                             "would need different donations")
        targets[node] = edited
        needs_partial = needs_partial or partial_needed
    partial_name = _partial_name(module) if needs_partial else None
    result = wrapper.module.visit(_Replacer(targets, partial_name or "partial"))
    if needs_partial and partial_name is None:
        result = _import_partial(result)
    return result.code


# ------------------------------------------------------------- finding it --


@dataclass(frozen=True)
class _Found:
    """The jit expression of one request: a bare decorator (``@jax.jit``) or a call."""

    node: cst.CSTNode
    kind: JitKind
    decorator: bool
    jitted: cst.BaseExpression | None  # the function a call-style jit is given


def _dotted(node: cst.CSTNode) -> str | None:
    if isinstance(node, cst.Name):
        return node.value
    if isinstance(node, cst.Attribute):
        inner = _dotted(node.value)
        return None if inner is None else f"{inner}.{node.attr.value}"
    return None


def _jit_kind(node: cst.CSTNode) -> JitKind | None:
    """Which jit a name is: ``jax.jit``/``jit``/``pjit``, ``eqx.filter_jit``, ``nnx.jit``."""
    name = _dotted(node)
    if name is None:
        return None
    parts = name.split(".")
    if parts[-1] == "filter_jit":
        return "equinox"
    if parts[-1] == "jit" and "nnx" in parts[:-1]:
        return "nnx"
    if parts[-1] in ("jit", "pjit"):
        return "jax"
    return None


def _is_partial(node: cst.CSTNode) -> bool:
    name = _dotted(node)
    return name is not None and name.split(".")[-1] == "partial"


def _classify(node: cst.CSTNode, decorator: bool) -> _Found | None:
    """The jit this expression makes, if it is one of the handled spellings."""
    kind = _jit_kind(node)
    if kind is not None:
        return _Found(node, kind, decorator=True, jitted=None) if decorator else None
    if not isinstance(node, cst.Call):
        return None
    kind = _jit_kind(node.func)
    if kind is not None:
        first = node.args[0] if node.args and node.args[0].keyword is None else None
        jitted = first.value if first is not None and not first.star else None
        return _Found(node, kind, decorator, None if decorator else jitted)
    if _is_partial(node.func) and node.args and node.args[0].keyword is None:
        kind = _jit_kind(node.args[0].value)
        if kind is not None:
            return _Found(node, kind, decorator, None)
    return None


class _Finder(cst.CSTVisitor):
    """For each request's line: the decorator of its function, else the innermost
    jit call spanning the line."""

    def __init__(self, requests: Sequence[EditRequest], positions: object) -> None:
        self.requests = {r.line: r for r in requests}
        self.positions = positions
        self.found: dict[int, _Found] = {}
        self._span: dict[int, int] = {}

    def _lines(self, node: cst.CSTNode) -> tuple[int, int]:
        where = self.positions[node]  # type: ignore[index]
        return where.start.line, where.end.line

    def visit_FunctionDef(self, node: cst.FunctionDef) -> None:
        if not node.decorators:
            return
        first = self._lines(node.decorators[0])[0]
        def_line = self._lines(node.name)[0]
        for line, request in self.requests.items():
            if node.name.value != request.function or not first <= line <= def_line:
                continue
            for decorator in node.decorators:
                found = _classify(decorator.decorator, decorator=True)
                if found is not None and found.kind == request.donate.framework:
                    self.found[line], self._span[line] = found, -1

    def visit_Call(self, node: cst.Call) -> None:
        start, end = self._lines(node)
        for line in self.requests:
            if not start <= line <= end or self._span.get(line, 1 << 30) <= end - start:
                continue
            found = _classify(node, decorator=False)
            if found is not None:
                self.found[line], self._span[line] = found, end - start


# ------------------------------------------------------------- editing it --


def _edit(found: _Found, request: EditRequest, path: str
          ) -> tuple[cst.CSTNode, cst.CSTNode, bool]:
    """``(node, its replacement, whether the replacement names partial)``."""
    where = f"{path}:{request.line}"
    if found.kind != request.donate.framework:
        raise FixRefused(f"{where}: {request.function} is jitted by a {found.kind} jit here, "
                         f"but the advice is for {request.donate.framework}'s")
    if found.jitted is not None and not _names(found.jitted, request.function):
        raise FixRefused(f"{where}: the jit call is built dynamically (it jits "
                         f"{_code(found.jitted)}, not {request.function} by name); edit it "
                         "by hand")
    if not isinstance(found.node, cst.Call):  # a bare decorator
        keywords = [_keyword(k, v) for k, v in request.donate.keywords]
        if found.kind == "jax":
            args = [cst.Arg(found.node), *keywords]  # type: ignore[arg-type]
            return found.node, cst.Call(cst.Name("partial"), _commas(args)), True
        return found.node, cst.Call(found.node, _commas(keywords)), False  # type: ignore[arg-type]
    call = found.node
    for arg in call.args:
        if arg.star:
            raise FixRefused(f"{where}: the jit call is built dynamically ({arg.star} "
                             "arguments may hold a donation); edit it by hand")
        if arg.keyword is not None and arg.keyword.value in DONATION_KEYWORDS[found.kind]:
            try:
                ast.literal_eval(_code(arg.value))
            except (ValueError, SyntaxError):
                raise FixRefused(f"{where}: the jit call is built dynamically "
                                 f"({arg.keyword.value}={_code(arg.value)} is not a literal);"
                                 " edit it by hand") from None
    return call, _with_keywords(call, request.donate.keywords), False


def _names(expr: cst.BaseExpression, function: str) -> bool:
    """Whether ``expr`` (what a jit call is given) is the function named ``function``."""
    if isinstance(expr, cst.Lambda):
        return function == "<lambda>"
    if isinstance(expr, cst.Call) and _is_partial(expr.func) and expr.args:
        return _names(expr.args[0].value, function)
    name = _dotted(expr)
    return name is not None and name.split(".")[-1] == function


def _code(node: cst.CSTNode) -> str:
    return cst.Module(body=[]).code_for_node(node)


def _keyword(name: str, value: str) -> cst.Arg:
    return cst.Arg(cst.parse_expression(value), keyword=cst.Name(name),
                   equal=cst.AssignEqual(cst.SimpleWhitespace(""), cst.SimpleWhitespace("")))


def _commas(args: list[cst.Arg]) -> list[cst.Arg]:
    return [a.with_changes(comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" ")))
            if i < len(args) - 1 else a for i, a in enumerate(args)]


def _with_keywords(call: cst.Call, keywords: Sequence[tuple[str, str]]) -> cst.Call:
    """``call`` with each keyword's value replaced, or the keyword appended in the
    call's own layout (its separator and trailing comma)."""
    args = list(call.args)
    for name, value in keywords:
        new = cst.parse_expression(value)
        index = next((i for i, a in enumerate(args)
                      if a.keyword is not None and a.keyword.value == name), None)
        if index is not None:
            if not args[index].value.deep_equals(new):
                args[index] = args[index].with_changes(value=new)
            continue
        added = _keyword(name, value)
        if args:
            last = args[-1]
            separator = (args[-2].comma if len(args) > 1
                         and isinstance(args[-2].comma, cst.Comma)
                         else cst.Comma(whitespace_after=cst.SimpleWhitespace(" ")))
            if isinstance(last.comma, cst.Comma):  # a trailing comma: keep the layout
                added = added.with_changes(comma=last.comma)
                if isinstance(separator.whitespace_after, cst.SimpleWhitespace):
                    separator = last.comma
            args[-1] = last.with_changes(comma=separator)
        args.append(added)
    return call.with_changes(args=args)


def _partial_name(module: cst.Module) -> str | None:
    """How the module already names functools.partial, else ``None``."""
    for statement in module.body:
        if not isinstance(statement, cst.SimpleStatementLine):
            continue
        for small in statement.body:
            if (isinstance(small, cst.ImportFrom) and _dotted(small.module or cst.Name(""))
                    == "functools" and not isinstance(small.names, cst.ImportStar)):
                for alias in small.names:
                    if _dotted(alias.name) == "partial":
                        return alias.evaluated_alias or "partial"
            if isinstance(small, cst.Import):
                for alias in small.names:
                    if _dotted(alias.name) == "functools":
                        return f"{alias.evaluated_alias or 'functools'}.partial"
    return None


def _import_partial(module: cst.Module) -> cst.Module:
    """``module`` with ``from functools import partial`` among its leading standard
    library imports where isort would put it (or before its first import)."""
    body = list(module.body)
    new = cst.parse_statement("from functools import partial\n")
    imports = [i for i, s in enumerate(body) if _imported(s) is not None]
    if not imports:
        return module.with_changes(body=[new, *body])
    first = next((i for i in imports if _imported(body[i]) != "__future__"), None)
    if first is None:
        return module.with_changes(body=[*body[:imports[-1] + 1], new,
                                         *body[imports[-1] + 1:]])
    block = []
    for i in range(first, len(body)):
        name = _imported(body[i])
        if name is None or name.split(".")[0] not in sys.stdlib_module_names or (
                i != first and body[i].leading_lines):
            break
        block.append(i)
    # isort's order, ruff's too: plain imports first, then from-imports by module
    later = [i for i in block if (_imported(body[i]) or "") > "functools" and isinstance(
        body[i].body[0], cst.ImportFrom)]  # type: ignore[index]
    if later:
        at = later[0]
        new = new.with_changes(leading_lines=body[at].leading_lines)
        body[at] = body[at].with_changes(leading_lines=[])
    elif block:
        at = block[-1] + 1
    else:
        at = first
        new = new.with_changes(leading_lines=body[at].leading_lines)
        body[at] = body[at].with_changes(leading_lines=[cst.EmptyLine()])
    body.insert(at, new)
    return module.with_changes(body=body)


def _imported(statement: cst.CSTNode) -> str | None:
    """The module a top-level import statement imports from; ``None`` if it is none."""
    if not isinstance(statement, cst.SimpleStatementLine) or len(statement.body) != 1:
        return None
    small = statement.body[0]
    if isinstance(small, cst.ImportFrom) and small.module is not None and not small.relative:
        return _dotted(small.module)
    if isinstance(small, cst.Import):
        return _dotted(small.names[0].name)
    return None


class _Replacer(cst.CSTTransformer):
    def __init__(self, targets: dict[cst.CSTNode, cst.CSTNode], partial: str) -> None:
        self.targets = targets
        self.partial = cst.parse_expression(partial)

    def on_leave(self, original: Any, updated: Any) -> Any:
        replacement = self.targets.get(original)
        if replacement is None:
            return updated
        if (isinstance(replacement, cst.Call) and isinstance(replacement.func, cst.Name)
                and replacement.func.value == "partial" and not isinstance(original, cst.Call)):
            return replacement.with_changes(func=self.partial)
        return replacement
