"""Kernel sources of a notebook's graded cells, taken out WITHOUT executing it (for `python -m cudl.grade`).

A graded cell holds `# NBVAL_CHECK_OUTPUT` and calls `cudl.grade.<name>(<name>_src)` (or
`cudl.grade.run("<name>", src)`). Cells are parsed with `ast`; only assignments of plain string literals
count as sources, so nothing the student wrote in Python runs, and a redefined grader changes nothing.
"""

from __future__ import annotations

import ast
import json
from dataclasses import dataclass
from pathlib import Path


@dataclass
class GradedCell:
    """One graded call: the grader's name and the kernel source it gets (None: `problem` says why)."""

    grader: str
    source: str | None
    problem: str = ""


def _parse(code: str) -> ast.Module | None:
    # IPython lines (%magic, !shell) are not Python: blank them, keep the line numbers.
    lines = ["" if ln.lstrip().startswith(("%", "!")) else ln for ln in code.splitlines()]
    try:
        return ast.parse("\n".join(lines))
    except SyntaxError:
        return None


def _grade_call(node: ast.Call) -> tuple[str, ast.expr | None] | None:
    """(grader, source argument) for `cudl.grade.NAME(src)` or `cudl.grade.run("NAME", src)`."""
    f = node.func
    if not (isinstance(f, ast.Attribute) and isinstance(f.value, ast.Attribute) and f.value.attr == "grade"
            and isinstance(f.value.value, ast.Name) and f.value.value.id == "cudl"):
        return None
    args = list(node.args)
    if f.attr == "run":
        if not args or not (isinstance(args[0], ast.Constant) and isinstance(args[0].value, str)):
            return None
        return args[0].value, args[1] if len(args) > 1 else None
    return f.attr, args[0] if args else None


def _resolve(name: str, arg: ast.expr | None, strings: dict[str, str]) -> GradedCell:
    if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
        return GradedCell(name, arg.value)
    if isinstance(arg, ast.Name) and arg.id in strings:
        return GradedCell(name, strings[arg.id])
    return GradedCell(name, None, "its kernel source is not a string literal assigned to a variable in the notebook")


def _assign(stmt: ast.stmt, strings: dict[str, str]) -> None:
    """Track top-level `name = "literal"`; any other assignment to a name forgets it."""
    if not isinstance(stmt, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
        return
    targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
    literal = (isinstance(stmt, ast.Assign) and isinstance(stmt.value, ast.Constant)
               and isinstance(stmt.value.value, str))
    for t in targets:
        if isinstance(t, ast.Name):
            if literal:
                strings[t.id] = stmt.value.value  # type: ignore[union-attr]
            else:
                strings.pop(t.id, None)


def cells(path: Path) -> list[str]:
    """The code cells of an .ipynb file, as text."""
    nb = json.loads(Path(path).read_text())
    out = []
    for c in nb.get("cells", []):
        if c.get("cell_type") == "code":
            src = c.get("source", "")
            out.append("".join(src) if isinstance(src, list) else src)
    return out


def graded_sources(path: Path) -> list[GradedCell]:
    """Every graded call of a notebook, in order, with the string literal its source variable last held."""
    strings: dict[str, str] = {}
    found: list[GradedCell] = []
    for code in cells(path):
        tree = _parse(code)
        if tree is None:
            continue
        graded = "NBVAL_CHECK_OUTPUT" in code
        for stmt in tree.body:  # in order: a source assigned in the graded cell itself counts from there on
            for node in ast.walk(stmt) if graded else ():
                call = _grade_call(node) if isinstance(node, ast.Call) else None
                if call is not None:
                    found.append(_resolve(*call, strings))
            _assign(stmt, strings)
    return found
