"""The package's layers, read from the source (every `import`, function-level ones included):
web/controller → remediation → policy/actions → signals/providers/store/kube → model. A lower
package never imports a higher one; the CLI root and the composition roots wire them."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import remediator

ROOT = Path(remediator.__file__).parent
# Packages a package must not import (directly or through a function-level import).
FORBIDDEN: dict[str, frozenset[str]] = {
    "model": frozenset(
        {"store", "policy", "remediation", "actions", "web", "controller", "backtest", "demo"}
    ),
    "store": frozenset({"remediation", "web", "controller", "backtest", "demo"}),
    "policy": frozenset({"remediation", "web", "controller", "backtest", "demo", "store"}),
    "signals": frozenset({"remediation", "web", "controller", "backtest", "demo", "policy"}),
    "kube": frozenset({"remediation", "web", "controller", "backtest", "demo", "policy", "store"}),
    "providers": frozenset({"remediation", "web", "controller", "backtest", "demo", "policy"}),
    "remediation": frozenset({"web", "controller", "demo"}),
    # The hardware ledger sits beside store/, over its own tables.
    "ledger": frozenset({"remediation", "web", "controller", "backtest", "demo", "policy"}),
    "rma": frozenset({"remediation", "web", "controller", "backtest", "demo", "policy"}),
    # The fence owner: steps and the controller ask it; it asks the store, kube and Slurm.
    "fences": frozenset({"remediation", "web", "controller", "backtest", "demo", "policy"}),
}
# doctor/ sits beside web/ and controller/, which run it: nothing below imports it.
for _lower in (
    "model",
    "store",
    "ledger",
    "policy",
    "signals",
    "kube",
    "providers",
    "rma",
    "fences",
    "remediation",
):
    FORBIDDEN[_lower] = FORBIDDEN[_lower] | {"doctor"}


def _imports(path: Path) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
    return found


@pytest.mark.parametrize("package", sorted(FORBIDDEN))
def test_a_lower_package_never_imports_a_higher_one(package: str) -> None:
    upward = sorted(
        f"{path.relative_to(ROOT)} -> {name}"
        for path in (ROOT / package).rglob("*.py")
        for name in _imports(path)
        if name.startswith("remediator.") and name.split(".")[1] in FORBIDDEN[package]
    )
    assert upward == []
