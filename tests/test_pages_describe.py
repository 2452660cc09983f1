"""Pages describe, the core computes (issue 30): no page file and not app.py does arithmetic or imports numpy.

Read with ``ast``, not run: an arithmetic operator (``+ - * / // % ** @``, as an expression, a unary minus or an
augmented assignment), or a call of a builtin that computes (``abs``, ``round``, ``sum``, ``min``, ``max``,
``pow``, ``divmod``), anywhere in a page is a number the page works out itself instead of asking the core for
it (:mod:`lensa.lessons`, or the core module of its step). Text is joined, not added: ``+`` between two pieces of
text is allowed only where one side is visibly text (a string literal, an f-string, or a call of ``.t`` or
``.join``), so the rule stays one a reader can check by eye. ``X | None`` in an annotation is not arithmetic.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from tests.pagetools import ROOT

PAGE_FILES = [*sorted((ROOT / "pages").glob("*.py")), ROOT / "app.py"]
ARITHMETIC = (ast.Add, ast.Sub, ast.Mult, ast.Div, ast.FloorDiv, ast.Mod, ast.Pow, ast.MatMult)
COMPUTING_BUILTINS = {"abs", "round", "sum", "min", "max", "pow", "divmod"}


def _textual(node: ast.expr) -> bool:
    if (isinstance(node, ast.Constant) and isinstance(node.value, str)) or isinstance(node, ast.JoinedStr):
        return True
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        return _textual(node.left) or _textual(node.right)
    return isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in ("t", "join")


def arithmetic_in(source: str) -> list[tuple[int, str]]:
    """Every arithmetic operation of ``source``: (line, the expression), in order."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.BinOp) and isinstance(node.op, ARITHMETIC):
            if isinstance(node.op, ast.Add) and (_textual(node.left) or _textual(node.right)):
                continue
            found.append((node.lineno, ast.unparse(node)))
        elif isinstance(node, ast.AugAssign) and isinstance(node.op, ARITHMETIC):
            if isinstance(node.op, ast.Add) and _textual(node.value):
                continue
            found.append((node.lineno, ast.unparse(node)))
        elif isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub | ast.UAdd):
            if not (
                isinstance(node.operand, ast.Constant) and isinstance(node.op, ast.USub)
            ):  # a literal -1 is a number
                found.append((node.lineno, ast.unparse(node)))
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in COMPUTING_BUILTINS:
            found.append((node.lineno, ast.unparse(node)))
    return sorted(found)


def numpy_imports_in(source: str) -> list[int]:
    lines = []
    for node in ast.walk(ast.parse(source)):
        if (isinstance(node, ast.Import) and any(a.name.split(".")[0] == "numpy" for a in node.names)) or (
            isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "numpy"
        ):
            lines.append(node.lineno)
    return lines


@pytest.mark.parametrize("path", PAGE_FILES, ids=[p.name for p in PAGE_FILES])
def test_a_page_does_no_arithmetic_and_imports_no_numpy(path: Path):
    source = path.read_text()
    assert arithmetic_in(source) == [], "ask lensa.lessons (or the step's core module) for these numbers"
    assert numpy_imports_in(source) == []


def test_the_counter_finds_what_it_forbids():
    """It is not a test that cannot fail: each forbidden form is found, and text joining is not."""
    code = """
x = a * 2
y = -b
z += 1
w = abs(q) + max(r, s)
v = n[: k + 1]
text = page.t("a") + " " + label
text += page.t("b")
ok = ", ".join(xs) + "."
t: int | None = None
"""
    found = [expr for _, expr in arithmetic_in(code)]
    assert found == ["a * 2", "-b", "z += 1", "abs(q)", "abs(q) + max(r, s)", "max(r, s)", "k + 1"]
    assert numpy_imports_in("import numbers\nimport numpy as np\nfrom numpy.typing import NDArray") == [2, 3]
