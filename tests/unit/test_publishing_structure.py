"""The publisher stays composed: objects with one owner each, not a chain of mixins.

Checked from the source: within ``_publishing`` no class derives from a class that itself
derives from one of the package (one level at most), no method is a hook that raises
``NotImplementedError`` for a subclass to fill in, and the C fast path names no
attribute of the publisher's Python classes (it works on the ``PendingCore`` struct).
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import liftbridge_sync

PACKAGE = Path(liftbridge_sync.__file__).parent
PUBLISHING = PACKAGE / "_publishing"
#: The C sources in the checkout these tests run from (wheels ship no C sources).
SOURCES = Path(__file__).resolve().parents[2] / "liftbridge_sync"


def _classes() -> dict[str, list[str]]:
    """Each class of ``_publishing`` by name: the names of its bases."""
    classes: dict[str, list[str]] = {}
    for path in sorted(PUBLISHING.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef):
                bases = [b.id if isinstance(b, ast.Name) else ast.unparse(b) for b in node.bases]
                classes[node.name] = bases
    return classes


def _depth(name: str, classes: dict[str, list[str]]) -> int:
    """How many of the package's own classes stand above ``name`` in a chain."""
    bases = [b for b in classes.get(name, []) if b in classes]
    return 0 if not bases else 1 + max(_depth(b, classes) for b in bases)


def test_no_inheritance_chain_is_deeper_than_one_level() -> None:
    classes = _classes()
    assert {"Publisher", "PendingTable", "OwnerLoop", "AckRouter", "Resender"} <= set(classes)
    deep = {name: _depth(name, classes) for name in classes if _depth(name, classes) > 1}
    assert deep == {}
    assert classes["Publisher"] == []  # the facade holds its parts, it is none of them


def test_the_depth_check_sees_a_chain() -> None:
    classes = {"A": [], "B": ["A"], "C": ["B", "object"]}
    assert [_depth(n, classes) for n in "ABC"] == [0, 1, 2]


def test_no_method_is_a_hook_raising_not_implemented() -> None:
    hooks = []
    for path in sorted(PUBLISHING.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                for statement in node.body:
                    if isinstance(statement, ast.Raise) and "NotImplementedError" in ast.unparse(
                        statement
                    ):
                        hooks.append(f"{path.name}:{node.name}")
    assert hooks == []


def test_the_c_fast_path_names_no_attribute_of_the_publishers_classes() -> None:
    # The slots the C code once located by name on Publisher (member_offsets); it now
    # reads the PendingCore struct it defines itself.
    former = {
        "_closing", "_ids", "_id_prefix", "_max_message", "_clock", "_send_lock", "_live",
        "_pending", "_max_in_flight", "_finished", "_seqs", "_seq", "_expiry", "_sleep_until",
    }  # fmt: skip
    for source in ("_speedups_submit.c", "_speedups_table.c"):
        literals = set(re.findall(r'"([^"\n]*)"', (SOURCES / source).read_text()))
        assert not literals & former, source
