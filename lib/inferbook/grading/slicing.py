"""The part of a notebook that defines an answer: what a sealed grader re-runs for a function.

A function answer cannot cross from the student's kernel to the grader as an object (its
code would run in the grader), nor be pickled (unpickling runs code too). It crosses as
*source*: the grader reads the submitted notebook itself, finds the `check("id", expr)`
call the kernel reported (cell and line), and keeps, from the cells before it, the top-level
statements the answer depends on — walking backwards from the names `expr` uses to the
statements that bind them (an assignment, a `def`, an `import`...), then to the names those
use, and so on. Names used inside a function body count only when they are global there
(`symtable` tells), and are looked up as of the check, when the function runs. The result,
run in a fresh process, rebuilds the function as the kernel had it: `ws2d_mlp =
jax.jit(shard_map(mlp_2d_body, mesh, ...))` brings `mlp_2d_body`, `mesh`, `P`, `jax` and
`shard_map` along, and nothing else.

Lines keep their cell and line numbers (the rest of each cell is blanked), so a traceback in
the sandbox points at the student's own line.
"""

from __future__ import annotations

import ast
import re
import symtable
from dataclasses import dataclass

__all__ = ["SliceError", "AnswerProgram", "answer_program"]

_MAGIC = re.compile(r"^\s*[%!]")


class SliceError(ValueError):
    """The answer cannot be rebuilt from the notebook's source; the message says why."""


@dataclass(frozen=True)
class AnswerProgram:
    """Cells to run in order (index, source with unrelated lines blanked), then `expression`."""

    cells: tuple[tuple[int, str], ...]
    expression: str


def _clean(source: str) -> str:
    """IPython magics (`%time`, `!pip`) blanked: they are not Python, and bind nothing."""
    return "\n".join("" if _MAGIC.match(line) else line for line in source.splitlines())


def _parse(source: str) -> ast.Module | None:
    try:
        return ast.parse(source)
    except SyntaxError:
        return None


def _root(node: ast.AST) -> str | None:
    while isinstance(node, (ast.Attribute, ast.Subscript, ast.Call)):
        node = node.func if isinstance(node, ast.Call) else node.value
    return node.id if isinstance(node, ast.Name) else None


def _bound(stmt: ast.stmt, modules: set[str]) -> tuple[set[str], set[str]]:
    """(names a top-level statement binds or changes, names it surely rebinds).

    `cfg.x = 1`, `table[k] = v` and `cases.append(c)` change `cfg`, `table`, `cases`: the
    statement belongs to the answer whenever the name does — unless the name is a module
    (`os._exit(1)` does not define `os`). Only an unconditional assignment, import, `def` or
    `class` at the top of the statement *rebinds* a name, hiding earlier bindings of it."""
    names: set[str] = set()
    todo: list[ast.AST] = [stmt]
    while todo:
        node = todo.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
            todo += node.decorator_list
            continue
        if isinstance(node, ast.Lambda):
            continue
        if isinstance(node, ast.alias):
            names.add(node.asname or node.name.split(".")[0])
        elif isinstance(node, ast.Name) and isinstance(node.ctx, (ast.Store, ast.Del)):
            names.add(node.id)
        elif isinstance(node, (ast.Attribute, ast.Subscript)) and \
                isinstance(node.ctx, (ast.Store, ast.Del)) and _root(node) not in modules:
            names.add(_root(node))
        elif isinstance(node, ast.Expr) and isinstance(node.value, ast.Call) and \
                isinstance(node.value.func, ast.Attribute) and \
                _root(node.value.func) not in modules:
            names.add(_root(node.value.func))
        todo += ast.iter_child_nodes(node)
    names.discard(None)
    rebound: set[str] = set()
    if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        rebound.add(stmt.name)
    elif isinstance(stmt, (ast.Import, ast.ImportFrom)):
        rebound |= {a.asname or a.name.split(".")[0] for a in stmt.names}
    elif isinstance(stmt, (ast.Assign, ast.AnnAssign)) and getattr(stmt, "value", None):
        targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
        for target in targets:
            elts = target.elts if isinstance(target, (ast.Tuple, ast.List)) else [target]
            rebound |= {t.id for t in elts if isinstance(t, ast.Name)}
    return names, rebound


def _uses(code: str, mode: str = "exec") -> tuple[set[str], set[str]]:
    """(global names a piece of code reads as it runs, names its function bodies read later).

    A function reads its globals when it is called — at the check, or later — so whatever
    binds them before the check counts, even after the `def`. (Names read in the bodies are
    counted as read at once too: a comprehension's body runs at once.)"""
    try:
        top = symtable.symtable(code, "<cell>", mode)
    except SyntaxError:
        return set(), set()
    later: set[str] = set()
    todo = list(top.get_children())
    while todo:
        table = todo.pop()
        later |= {s.get_name() for s in table.get_symbols()
                  if s.is_global() and (s.is_referenced() or s.is_assigned())}
        todo += table.get_children()
    now = {s.get_name() for s in top.get_symbols() if s.is_referenced()}
    return now | later, later


def _check_call(tree: ast.Module, question_id: str, line: int | None) -> ast.Call | None:
    calls = [node for node in ast.walk(tree) if isinstance(node, ast.Call)
             and (getattr(node.func, "id", None) == "check" or
                  getattr(node.func, "attr", None) == "check")
             and len(node.args) == 2 and isinstance(node.args[0], ast.Constant)
             and node.args[0].value == question_id]
    at_line = [c for c in calls if line is not None and c.lineno <= line <= c.end_lineno]
    return (at_line or calls or [None])[-1]


def answer_program(cells: list[str], cell: int, line: int | None,
                   question_id: str) -> AnswerProgram:
    """What re-creates the answer checked for `question_id` at (`cell`, `line`).

    `cells` holds every cell's source ("" for Markdown); `cell` is the index of the code cell
    whose check sent the answer, `line` the line of the call within it.
    """
    source = _clean(cells[cell])
    tree = _parse(source)
    call = _check_call(tree, question_id, line) if tree else None
    if call is None:
        raise SliceError(f'cell {cell + 1} holds no check("{question_id}", ...) call; call '
                         f"check with the question id written out, directly in the cell")
    expression = ast.get_source_segment(source, call.args[1]) or ast.unparse(call.args[1])
    statements: list[tuple[int, ast.stmt]] = []
    for index in range(cell + 1):
        parsed = _parse(_clean(cells[index])) if cells[index].strip() else None
        for stmt in (parsed.body if parsed else []):
            if index == cell and stmt.end_lineno >= call.lineno:
                break
            statements.append((index, stmt))
    modules = {a.asname or a.name.split(".")[0] for _, stmt in statements
               if isinstance(stmt, (ast.Import, ast.ImportFrom)) for a in stmt.names}
    at_check, _ = _uses(expression, "eval")           # what must be bound when check runs
    while True:                                        # a backward slice, to a fixed point
        needed, keep, grown = set(at_check), set(), False
        for k in range(len(statements) - 1, -1, -1):
            bound, rebound = _bound(statements[k][1], modules)
            if bound & needed:
                keep.add(k)
                now, later = _uses(ast.unparse(statements[k][1]))
                needed = (needed - rebound) | now
                grown |= not later <= at_check
                at_check |= later
        if not grown:
            break
    lines: dict[int, set[int]] = {}
    for k in keep:
        index, stmt = statements[k]
        first = min([stmt.lineno] + [d.lineno for d in getattr(stmt, "decorator_list", [])])
        lines.setdefault(index, set()).update(range(first, stmt.end_lineno + 1))
    program = []
    for index in sorted(lines):
        text = _clean(cells[index]).splitlines()
        program.append((index, "\n".join(t if n + 1 in lines[index] else ""
                                         for n, t in enumerate(text))))
    return AnswerProgram(tuple(program), expression)
