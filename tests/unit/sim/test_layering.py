"""The simulator's imports run downward: the API server knows nothing of the controllers, the
controllers nothing of the cloud, telemetry or faults beside them, and none of those of the
fleet, services and launch at the top; and no module imports itself round a cycle. Read from the
source (every `import`, function-level ones included), so nothing has to be executed."""

from __future__ import annotations

import ast
from pathlib import Path

import remediator.sim

ROOT = Path(remediator.sim.__file__).parent
PREFIX = "remediator.sim"


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join((PREFIX, *parts))


MODULES = {_module_name(p): p for p in ROOT.rglob("*.py")}


def _resolve(module: str, name: str | None) -> str | None:
    """The simulator module an import names: `from pkg import mod` is the module when it is one."""
    if name is not None and f"{module}.{name}" in MODULES:
        return f"{module}.{name}"
    return module if module in MODULES else None


def imports_of(module: str) -> set[str]:
    tree = ast.parse(MODULES[module].read_text())
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            targets = [_resolve(alias.name, None) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            targets = [_resolve(node.module, alias.name) for alias in node.names]
        else:
            continue
        found.update(t for t in targets if t is not None and t != module)
    return found


GRAPH = {module: imports_of(module) for module in MODULES}


def layer(module: str) -> int:
    """0 the API server, 1 Kubernetes' controllers, 2 the other imitated systems (cloud,
    telemetry, faults, and whatever package joins them), 3 the top-level modules."""
    parts = module.removeprefix(PREFIX).strip(".").split(".")
    if parts[:2] == ["kube", "api"]:
        return 0
    if parts[0] == "kube":
        return 1
    is_package_init = MODULES[module].name == "__init__.py"
    if len(parts) == 1 and not is_package_init:
        return 3
    return 2 if parts != [""] else 3


def test_every_import_points_to_the_same_layer_or_below() -> None:
    upward = sorted(
        f"{module} -> {target}"
        for module, targets in GRAPH.items()
        for target in targets
        if layer(target) > layer(module)
    )
    assert upward == []


def test_no_import_cycles() -> None:
    """Depth-first search; a back edge to a module on the current path is a cycle."""
    cycles: list[list[str]] = []
    state: dict[str, str] = {}  # "open" while on the path, "done" after

    def visit(module: str, path: list[str]) -> None:
        state[module] = "open"
        for target in sorted(GRAPH[module]):
            if state.get(target) == "open":
                cycles.append([*path[path.index(target) :], target])
            elif target not in state:
                visit(target, [*path, target])
        state[module] = "done"

    for module in sorted(GRAPH):
        if module not in state:
            visit(module, [module])
    assert cycles == []


def test_the_graph_is_read_from_the_real_modules() -> None:
    """Guards the checks above against passing vacuously on a parser that finds nothing."""
    assert "remediator.sim.kube.api.store" in GRAPH["remediator.sim.kube.controllers.cluster"]
    assert "remediator.sim.kube.controllers.cluster" in GRAPH["remediator.sim.fleet"]
    assert layer("remediator.sim.kube.api.server") == 0
    assert layer("remediator.sim.cloud.nodepool") == 2
    assert layer("remediator.sim.serve") == 3
