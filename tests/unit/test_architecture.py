"""The package's layering, checked from its source so the rule survives new contributors.

Each module belongs to a layer; a module may import its own layer or lower ones, never a
higher one, and the package has no import cycles (type-checking imports included). A new
module must be given a layer in ``LAYERS`` below, which is the architecture in one table.
"""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

import liftbridge_sync

PACKAGE = Path(liftbridge_sync.__file__).parent

#: (layer number, module prefixes), from the ground up. Longest prefix wins.
LAYERS: list[tuple[int, list[str]]] = [
    (0, ["liftbridge_sync.errors", "liftbridge_sync._proto"]),
    (0, ["liftbridge_sync._durations"]),  # the one check of every time argument
    (0, ["liftbridge_sync._ids"]),  # the checks of ids (StartAt's cursor id included)
    (0, ["liftbridge_sync._speedups"]),  # optional C extension (no imports; setup() wires it)
    (0, ["liftbridge_sync._extension"]),  # loads it (models and _wire ask it which base to use)
    (0, ["liftbridge_sync.models._timestamps", "liftbridge_sync.models._frozen_map"]),
    (1, ["liftbridge_sync.models", "liftbridge_sync.options", "liftbridge_sync._runtime"]),
    (
        1,
        [
            "liftbridge_sync.models._message",
            "liftbridge_sync.models._ack",
            "liftbridge_sync.models._metadata",
        ],
    ),
    (2, ["liftbridge_sync.positions", "liftbridge_sync.partitioners"]),
    (3, ["liftbridge_sync._wire", "liftbridge_sync.envelope", "liftbridge_sync.sbp"]),
    (3, ["liftbridge_sync.activity"]),  # activity stream events (models)
    (3, ["liftbridge_sync.settings", "liftbridge_sync.tail"]),  # config and output helpers
    (5, ["liftbridge_sync.otel"]),  # OpenTelemetry spans and instruments (optional API)
    (4, ["liftbridge_sync._transport"]),
    (4, ["liftbridge_sync._transport.h2.subscribe_receiver"]),  # Subscribe bytes to messages
    (5, ["liftbridge_sync._publishing", "liftbridge_sync.subscription"]),
    (5, ["liftbridge_sync.subscription.connection"]),  # opening and reopening a call
    (5, ["liftbridge_sync.consumer"]),  # consumer groups
    (5, ["liftbridge_sync.health"]),  # the bounded reachability probe
    (5, ["liftbridge_sync.stats"]),  # snapshots of a client: publisher, lag, channels
    (
        5,
        [
            "liftbridge_sync.consumer._membership",
            "liftbridge_sync.consumer._mailbox",
            "liftbridge_sync.consumer._readers",
            "liftbridge_sync.consumer._commits",
        ],
    ),
    (6, ["liftbridge_sync.client"]),
    (6, ["liftbridge_sync._client"]),  # the client's state and calls below its facade
    (7, ["liftbridge_sync"]),  # the package's face (__init__): re-exports the public names
    (
        8,
        [
            "liftbridge_sync.nats",
            "liftbridge_sync.testing",
            "liftbridge_sync.spark",
            "liftbridge_sync.flask",
            "liftbridge_sync.django",
            "liftbridge_sync.cli",
            "liftbridge_sync.__main__",
        ],
    ),
    (8, ["liftbridge_sync.nats._handoff"]),  # the NATS publisher's thread hand-off
]

#: Modules whose public names users import directly (besides ``liftbridge_sync``).
PUBLIC_MODULES = [
    "liftbridge_sync.activity",
    "liftbridge_sync.errors",
    "liftbridge_sync.health",
    "liftbridge_sync.models",
    "liftbridge_sync.stats",
    "liftbridge_sync.options",
    "liftbridge_sync.positions",
    "liftbridge_sync.partitioners",
]


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _modules() -> dict[str, Path]:
    return {
        _module_name(path): path
        for path in PACKAGE.rglob("*.py")
        if "_proto" not in path.parts  # generated
    }


def _layer(module: str) -> int:
    best: tuple[int, int] | None = None
    for number, prefixes in LAYERS:
        for prefix in prefixes:
            if module == prefix or module.startswith(prefix + "."):
                if best is None or len(prefix) > best[0]:
                    best = (len(prefix), number)
    if best is None:
        raise AssertionError(f"{module} has no layer: add it to LAYERS in {__file__}")
    return best[1]


def _imports(module: str, path: Path, known: set[str]) -> set[str]:
    """Package modules that ``module`` imports (``from x import y`` may name a module y)."""
    found: set[str] = set()
    is_package = path.name == "__init__.py"
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        targets: list[str] = []
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = module.split(".")
                anchor = anchor if is_package else anchor[:-1]
                anchor = anchor[: len(anchor) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            submodules = [f"{base}.{alias.name}" for alias in node.names]
            # ``from package import module`` depends on the module, not on the package's
            # face (which Python runs anyway, as it does for any import of a submodule).
            names_only = [m for m in submodules if m not in known]
            targets = submodules + ([base] if names_only else [])
        for target in targets:
            while target and target not in known:
                target = target.rpartition(".")[0]
            if target.startswith("liftbridge_sync") and target != module:
                found.add(target)
    return found


def _graph() -> dict[str, set[str]]:
    modules = _modules()
    known = set(modules) | {"liftbridge_sync._proto", "liftbridge_sync._speedups"}
    return {name: _imports(name, path, known) for name, path in modules.items()}


def test_every_module_has_a_layer() -> None:
    for module in _modules():
        _layer(module)


def _upward(graph: dict[str, set[str]]) -> list[str]:
    return [
        f"{module} (layer {_layer(module)}) imports {target} (layer {_layer(target)})"
        for module, targets in graph.items()
        for target in sorted(targets)
        if _layer(target) > _layer(module)
    ]


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in graph.get(node, ()):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                item = stack.pop()
                on_stack.discard(item)
                component.append(item)
                if item == node:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return cycles


def test_no_module_imports_a_higher_layer() -> None:
    upward = _upward(_graph())
    assert not upward, "\n".join(upward)


def test_no_import_cycles() -> None:
    cycles = _cycles(_graph())
    assert not cycles, f"import cycles: {cycles}"


def test_the_checks_catch_an_upward_import_and_a_cycle(tmp_path: Path) -> None:
    """Fed a module that imports the client from the errors layer, both checks fire."""
    bad = tmp_path / "errors.py"
    bad.write_text("from liftbridge_sync.client import Client\n")
    graph = _graph()
    graph["liftbridge_sync.errors"] = _imports("liftbridge_sync.errors", bad, set(graph))
    assert graph["liftbridge_sync.errors"] == {"liftbridge_sync.client"}
    assert any(line.startswith("liftbridge_sync.errors (layer 0)") for line in _upward(graph))
    assert any("liftbridge_sync.errors" in cycle for cycle in _cycles(graph))


#: Packages above the transport seam (``_transport.opening``): what the wire speaks is
#: not theirs to know, so they see Liftbridge errors, never grpc's.
GRPC_FREE = ["liftbridge_sync.subscription", "liftbridge_sync.consumer"]


def _third_party_imports(path: Path) -> set[str]:
    """Top-level names of the absolute imports in ``path``, type-checking ones included."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name.partition(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            found.add(node.module.partition(".")[0])
    return found


def test_subscription_and_consumer_never_import_grpc() -> None:
    checked = [
        (module, path)
        for module, path in _modules().items()
        if any(module == p or module.startswith(p + ".") for p in GRPC_FREE)
    ]
    assert len(checked) >= 10  # both packages were found
    offenders = [module for module, path in checked if "grpc" in _third_party_imports(path)]
    assert not offenders, f"import grpc above the transport seam: {offenders}"


def test_the_grpc_check_catches_an_import(tmp_path: Path) -> None:
    bad = tmp_path / "partition.py"
    bad.write_text("if True:\n    from grpc import StatusCode\n")
    assert "grpc" in _third_party_imports(bad)


@pytest.mark.parametrize("name", liftbridge_sync.__all__)
def test_public_names_show_a_public_module(name: str) -> None:
    obj = getattr(liftbridge_sync, name)
    module = getattr(obj, "__module__", None)
    if isinstance(obj, type):
        assert module in {"liftbridge_sync", *PUBLIC_MODULES}, (name, module)


def test_all_lists_every_public_name_and_nothing_private() -> None:
    exported = set(liftbridge_sync.__all__)
    assert all(not n.startswith("_") or n == "__version__" for n in exported)
    for module_name in PUBLIC_MODULES:
        module = importlib.import_module(module_name)
        for name in module.__all__:
            obj = getattr(module, name)
            # Classes users handle are exported at the top; helper functions and the
            # enums behind positions stay in their module.
            if isinstance(obj, type) and name not in {"FrozenMap", "StartKind", "StopKind"}:
                assert name in exported, f"{module_name}.{name} is missing from __all__"
