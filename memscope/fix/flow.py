"""Is a donated argument read after the call? A simple data-flow check of the caller.

A donated array is deleted by the call, so code that reads it afterwards
raises. This reads the calling code (the line the first call came from) and
follows each donated argument written as a plain name through the rest of its
scope: rebound (``params, opt = step(params, opt)``) is safe; read again, in
straight-line code or by the next iteration of an enclosing loop, is not.
Anything else (an attribute, a subscript, a call made through a helper) it
cannot see, and says so. Pure: source text in, a verdict out; no JAX.
"""

from __future__ import annotations

import ast
from collections.abc import Sequence
from dataclasses import dataclass

Scope = ast.Module | ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda


@dataclass(frozen=True)
class FlowVerdict:
    """``read``: why a donated argument is read after the call (refuse the edit);
    ``unchecked``: why the check could not be made; both ``None``: safe."""

    read: str | None = None
    unchecked: str | None = None


def positional_parameters(text: str, line: int) -> tuple[str, ...] | None:
    """The positional parameter names of the function defined at ``line``; ``None``
    if no ``def`` is there."""
    try:
        tree = ast.parse(text)
    except SyntaxError:
        return None
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.lineno == line:
            return tuple(a.arg for a in (*node.args.posonlyargs, *node.args.args))
    return None


def check_call(text: str, line: int, callees: Sequence[str], donated: Sequence[str],
               params: Sequence[str] | None, *, where: str) -> FlowVerdict:
    """Whether the call at ``line`` of ``text`` (to a function known by one of
    the names ``callees``) reads an argument in ``donated`` after it.

    ``donated`` holds labels as the report writes them: parameter names, or
    ``argument N`` for the N-th positional argument; ``params`` maps names to
    positions. ``where`` (``path:line``) starts every message.
    """
    try:
        tree = ast.parse(text)
    except SyntaxError:
        return FlowVerdict(unchecked=f"{where} does not parse")
    found = _call_at(tree, line, callees)
    if found is None:
        return FlowVerdict(unchecked=f"no call of {' or '.join(callees)} found at {where}")
    call, statement, scope, loops = found
    for label in donated:
        expr = _argument(call, label, params)
        if expr is None:
            return FlowVerdict(unchecked=f"{where} passes {label} in a way this check cannot "
                                         "follow (*args, **kwargs or a default)")
        if not isinstance(expr, ast.Name):
            if isinstance(expr, ast.Call | ast.BinOp | ast.Constant | ast.Dict | ast.Tuple):
                continue  # a temporary: nothing else holds it
            if _assigned_again(statement, expr):
                continue  # self.params = step(self.params): the same place, rebound
            return FlowVerdict(unchecked=f"{where} passes {label} as {ast.unparse(expr)}, "
                                         "which this check cannot follow")
        read = _read_after(expr.id, call, statement, scope, loops)
        if read is not None:
            return FlowVerdict(read=f"{expr.id} is donated at {where} but {read}")
    return FlowVerdict()


def _call_at(tree: ast.Module, line: int, callees: Sequence[str]
             ) -> tuple[ast.Call, ast.stmt, Scope, list[ast.For | ast.While]] | None:
    """The call on ``line`` to one of ``callees``, its statement, its scope, and
    the loops around it within that scope (innermost last)."""

    def visit(node: ast.AST, scope: Scope, loops: list[ast.For | ast.While],
              statement: ast.stmt | None) -> tuple[ast.Call, ast.stmt, Scope,
                                                   list[ast.For | ast.While]] | None:
        for child in ast.iter_child_nodes(node):
            inner_scope, inner_loops, inner_statement = scope, loops, statement
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
                inner_scope, inner_loops = child, []
            if isinstance(child, ast.stmt):
                inner_statement = child
            if (isinstance(child, ast.Call) and statement is not None
                    and child.lineno <= line <= (child.end_lineno or child.lineno)
                    and _callee(child.func) in callees):
                return child, statement, scope, loops
            if isinstance(child, ast.For | ast.While) and child not in loops:
                inner_loops = [*loops, child]
            found = visit(child, inner_scope, inner_loops, inner_statement)
            if found is not None:
                return found
        return None

    return visit(tree, tree, [], None)


def _callee(func: ast.expr) -> str | None:
    if isinstance(func, ast.Name):
        return func.id
    if isinstance(func, ast.Attribute):
        return func.attr
    return None


def _argument(call: ast.Call, label: str, params: Sequence[str] | None) -> ast.expr | None:
    """The expression the call passes for the argument ``label``."""
    position: int | None = None
    if label.startswith("argument ") and label[len("argument "):].isdigit():
        position = int(label[len("argument "):])
    else:
        for k in call.keywords:
            if k.arg == label:
                return k.value
        if params is not None and label in params:
            position = list(params).index(label)
    if position is None:
        return None
    before = call.args[:position + 1]
    if position >= len(call.args) or any(isinstance(a, ast.Starred) for a in before):
        return None
    return call.args[position]


def _events(name: str, node: ast.AST) -> list[tuple[tuple[int, int], bool]]:
    """Every use of ``name`` under ``node`` outside nested functions and classes
    (their names are their own): ``((line, column), is_store)``, in order."""
    uses = []
    todo = [node]
    while todo:
        n = todo.pop()
        if isinstance(n, ast.Name) and n.id == name:
            uses.append(((n.lineno, n.col_offset), not isinstance(n.ctx, ast.Load)))
        for child in ast.iter_child_nodes(n):
            if not isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda
                              | ast.ClassDef):
                todo.append(child)
    return sorted(uses)


def _end(node: ast.AST) -> tuple[int, int]:
    return (getattr(node, "end_lineno", 0) or 0, getattr(node, "end_col_offset", 0) or 0)


def _read_after(name: str, call: ast.Call, statement: ast.stmt, scope: Scope,
                loops: Sequence[ast.For | ast.While]) -> str | None:
    """Where ``name`` is read after ``call`` before being bound again; ``None`` if not."""
    if isinstance(statement, ast.Assign | ast.AnnAssign | ast.AugAssign) and any(
            store for _, store in _events(name, _targets(statement))):
        return None  # rebound by the very statement that calls
    later = [e for e in _events(name, scope) if e[0] > _end(call)]
    if loops:
        loop = loops[-1]
        inside = [e for e in later if e[0] <= _end(loop)]
        if inside:
            (line, _), store = inside[0]
            return None if store else f"is read again at line {line}"
        start, at_call = (loop.lineno, loop.col_offset), (call.lineno, call.col_offset)
        if not any(store for at, store in _events(name, loop) if start <= at < at_call):
            return f"the loop at line {loop.lineno} passes it again in its next iteration"
    if later:
        (line, _), store = later[0]
        return None if store else f"is read again at line {line}"
    return None


def _assigned_again(statement: ast.stmt, expr: ast.expr) -> bool:
    """Whether ``statement`` assigns to the very place ``expr`` reads (``self.params``)."""
    if not isinstance(statement, ast.Assign | ast.AnnAssign | ast.AugAssign):
        return False
    text = ast.unparse(expr)
    places = [_targets(statement)]
    while places:
        place = places.pop()
        if isinstance(place, ast.Tuple | ast.List):
            places.extend(place.elts)
        elif isinstance(place, ast.expr) and ast.unparse(place) == text:
            return True
    return False


def _targets(statement: ast.Assign | ast.AnnAssign | ast.AugAssign) -> ast.AST:
    if isinstance(statement, ast.Assign):
        return ast.Tuple(elts=list(statement.targets), ctx=ast.Store())
    return statement.target
