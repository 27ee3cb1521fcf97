"""``client.py`` stays a facade: its code, docstrings and comments aside, fits a budget.

Issue 27 asks for signatures, docstrings and one call each, at most 450 lines of code.
Counted from the source with ``tokenize`` and ``ast``, so the rule survives new
contributors: a line counts when it holds a token other than a comment, and it is not
part of a docstring (a string statement, as ``ast`` sees it).
"""

from __future__ import annotations

import ast
import io
import tokenize
from pathlib import Path

import liftbridge_sync.client

BUDGET = 450
_SKIPPED = {
    tokenize.COMMENT,
    tokenize.NL,
    tokenize.NEWLINE,
    tokenize.INDENT,
    tokenize.DEDENT,
    tokenize.ENDMARKER,
}


def code_lines(source: str) -> int:
    """The lines of ``source`` holding code: no blank, comment-only or docstring line."""
    docstrings: set[int] = set()
    for node in ast.walk(ast.parse(source)):
        if (
            isinstance(node, ast.Expr)
            and isinstance(node.value, ast.Constant)
            and isinstance(node.value.value, str)
        ):
            docstrings.update(range(node.lineno, (node.end_lineno or node.lineno) + 1))
    code: set[int] = set()
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type not in _SKIPPED:
            code.update(range(token.start[0], token.end[0] + 1))
    return len(code - docstrings)


def test_the_counter_counts_code_and_nothing_else() -> None:
    source = '''"""Module docstring,
    on two lines."""

# a comment
import os  # a trailing comment


def f(
    x: int,
) -> int:
    """Docstring."""
    return (
        x
        + 1
    )
'''
    # import; def f( / x: int, / ) -> int:; return ( / x / + 1 / )
    assert code_lines(source) == 1 + 3 + 4


def test_client_py_is_at_most_450_lines_of_code() -> None:
    path = Path(liftbridge_sync.client.__file__)
    count = code_lines(path.read_text(encoding="utf-8"))
    assert count <= BUDGET, f"{path.name} has {count} lines of code (budget {BUDGET})"
