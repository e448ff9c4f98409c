"""The boundaries DESIGN.md draws, checked on the source: who may import what."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
APPS = ("portal", "jobs", "monitoring")


def imports_of(package: str) -> dict[str, set[str]]:
    """Top-level module names imported by each file of ``package`` (migrations excluded)."""
    found: dict[str, set[str]] = {}
    for path in (ROOT / package).rglob("*.py"):
        if "migrations" in path.parts:
            continue
        names: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names.add(node.module)
        found[str(path.relative_to(ROOT))] = names
    return found


def roots(names: set[str]) -> set[str]:
    return {name.split(".")[0] for name in names}


@pytest.mark.parametrize("package", ["scheduling", "sandbox"])
def test_scheduling_and_sandbox_import_nothing_from_django_or_the_portal(package: str) -> None:
    for path, names in imports_of(package).items():
        forbidden = roots(names) & {"django", "rest_framework", *APPS}
        assert not forbidden, f"{path} imports {forbidden}"


def test_scheduling_is_pure() -> None:
    for path, names in imports_of("scheduling").items():
        io = roots(names) & {"requests", "urllib3", "kubernetes", "socket", "sqlite3", "http"}
        assert not io, f"{path} does I/O through {io}"


def test_the_portal_never_imports_the_sandbox() -> None:
    for package in APPS:
        for path, names in imports_of(package).items():
            assert "sandbox" not in roots(names), path


def test_kubernetes_is_reached_through_one_adapter() -> None:
    users = {
        path
        for package in APPS
        for path, names in imports_of(package).items()
        if "kubernetes" in roots(names)
    }
    assert users == {"portal/kube.py"}


def test_prometheus_is_reached_through_one_adapter() -> None:
    users = {
        path
        for package in APPS
        for path, names in imports_of(package).items()
        if "prometheus_api_client" in roots(names)
    }
    assert users == {"monitoring/prometheus.py"}
