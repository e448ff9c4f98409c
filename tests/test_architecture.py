"""The boundaries DESIGN.md draws, checked on the source: who may import what.

The layers, lowest first; each may import only the layers below it, never one above,
not even inside a function:

    scheduling  pure kube-scheduler semantics (no Django, no I/O)
    core        the shared kernel: the domain error type, the API error shape, Redis
    cluster     the Kubernetes adapter, the portal's labels and PriorityClasses, the
                GPU catalog discovered from the nodes
    teams       teams, members, quotas, the audit log, their mirror in the cluster
    notifications  people's channels (email, webhooks, Slack) and deliveries to them;
                knows users and teams, not jobs (the jobs layer words each notice)
    jobs        spec, manifests, admission, apply, tracking
    monitoring  the Prometheus adapter, charts, the portal's own /metrics
    portal      the Django project: settings, urls, Celery app, authentication, errors

``sandbox`` imports only ``scheduling``; nothing imports ``sandbox``.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LAYERS = (
    "scheduling",
    "core",
    "cluster",
    "teams",
    "notifications",
    "jobs",
    "monitoring",
    "portal",
)
APPS = LAYERS[1:]


def imports_of(package: str) -> dict[str, set[str]]:
    """Module names imported by each file of ``package``, at any depth of the file
    (function-local imports included; migrations excluded)."""
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


def test_every_layer_of_the_tree_is_in_the_order() -> None:
    # A new top-level package must take its place in LAYERS (or be the sandbox): an
    # app the order does not know would escape every check below.
    packages = {
        path.parent.name
        for path in ROOT.glob("*/__init__.py")
        if path.parent.name not in ("tests", "bench")
    }
    assert packages == {*LAYERS, "sandbox"}


@pytest.mark.parametrize("layer", LAYERS)
def test_a_layer_never_imports_a_layer_above_it(layer: str) -> None:
    above = set(LAYERS[LAYERS.index(layer) + 1 :])
    for path, names in imports_of(layer).items():
        upward = roots(names) & above
        assert not upward, f"{path} imports {sorted(upward)}, above {layer}"


@pytest.mark.parametrize("package", ["scheduling", "sandbox"])
def test_scheduling_and_sandbox_import_nothing_from_django_or_the_portal(package: str) -> None:
    for path, names in imports_of(package).items():
        forbidden = roots(names) & {"django", "rest_framework", *APPS}
        assert not forbidden, f"{path} imports {forbidden}"


def test_scheduling_is_pure() -> None:
    for path, names in imports_of("scheduling").items():
        io = roots(names) & {"requests", "urllib3", "kubernetes", "socket", "sqlite3", "http"}
        assert not io, f"{path} does I/O through {io}"


def test_nothing_imports_the_sandbox() -> None:
    for package in LAYERS:
        for path, names in imports_of(package).items():
            assert "sandbox" not in roots(names), path


def test_kubernetes_is_reached_through_one_adapter() -> None:
    users = {
        path
        for package in APPS
        for path, names in imports_of(package).items()
        if "kubernetes" in roots(names)
    }
    assert users == {"cluster/kube.py"}


def test_prometheus_and_webhooks_are_each_reached_through_one_module() -> None:
    # Plain HTTP goes out in two places only: Prometheus's API through its adapter, and
    # notifications to webhooks and Slack through the channels module.
    users = {
        path
        for package in APPS
        for path, names in imports_of(package).items()
        if roots(names) & {"requests", "prometheus_api_client"}
    }
    assert users == {"monitoring/prometheus.py", "notifications/channels.py"}


def test_the_command_line_client_imports_nothing_of_the_server() -> None:
    # It installs on a laptop without Django or the portal (cli/pyproject.toml).
    for path, names in imports_of("cli/gpuportal").items():
        server = roots(names) & {"django", "rest_framework", "celery", "sandbox", *LAYERS}
        assert not server, f"{path} imports {server}"


def test_the_manifest_builders_do_no_io() -> None:
    # Pure builders (spec → dicts) are tested as plain dicts with no cluster (STYLE.md).
    for path, names in imports_of("jobs/manifests").items():
        io = roots(names) & {"django", "kubernetes", "requests", "urllib3", "redis"}
        io |= {n for n in names if n.startswith("cluster.") and n != "cluster.labels"} - {
            "cluster.priority_classes"
        }
        assert not io, f"{path} imports {sorted(io)}"
