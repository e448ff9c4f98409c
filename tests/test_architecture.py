"""The boundaries docs/architecture.md draws, checked on the source: who may import what.

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
    workspaces  interactive workspaces: their pages, API, stop/start/delete, the proxy
    monitoring  the Prometheus adapter, charts, the portal's own /metrics
    gpu_stack   the GPU Operator from the admin's seat: state, MIG and time-slicing changes, advice
    portal      the Django project: settings, urls, Celery app, authentication, errors

``sandbox`` imports only ``scheduling``; nothing imports ``sandbox``.

Inside an app, modules import each other without circles, under one rule for Celery
(HackSoft's): services import ``*_task`` at module top, and a task imports the service it
calls inside its body; no other function imports the project's code.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
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
    "workspaces",
    "monitoring",
    "gpu_stack",
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
    # Pure builders (spec → dicts) are tested as plain dicts with no cluster (docs/architecture.md).
    for path, names in imports_of("jobs/manifests").items():
        io = roots(names) & {"django", "kubernetes", "requests", "urllib3", "redis"}
        io |= {n for n in names if n.startswith("cluster.") and n != "cluster.labels"} - {
            "cluster.priority_classes"
        }
        assert not io, f"{path} imports {sorted(io)}"


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _local_imports(
    tree: ast.Module,
) -> Iterator[tuple[ast.FunctionDef | ast.AsyncFunctionDef, ast.AST]]:
    """The imports inside functions, each with the function it is in."""
    for fn in ast.walk(tree):
        if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for node in ast.walk(fn):
                if isinstance(node, (ast.Import, ast.ImportFrom)):
                    yield fn, node


def _imported_modules(node: ast.AST, known: set[str]) -> set[str]:
    """The project modules an import statement loads (``from a import b`` is ``a.b`` when
    ``b`` is a module, else ``a``)."""
    if isinstance(node, ast.Import):
        return {alias.name for alias in node.names if alias.name in known}
    assert isinstance(node, ast.ImportFrom)
    if not node.module or node.level:
        return set()
    found = {f"{node.module}.{alias.name}" for alias in node.names} & known
    if len(found) < len(node.names) and node.module in known:
        found.add(node.module)
    return found


def _is_task(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    def name(decorator: ast.expr) -> str:
        target = decorator.func if isinstance(decorator, ast.Call) else decorator
        return target.id if isinstance(target, ast.Name) else getattr(target, "attr", "")

    return any(name(d) == "shared_task" for d in fn.decorator_list)


def _app_graph(app: str) -> dict[str, set[str]]:
    """Each module of ``app`` → the modules of the same app it imports (inside functions
    too: a circle dodged by an import in a function is still a circle)."""
    files = {
        _module_name(path): path
        for path in (ROOT / app).rglob("*.py")
        if "migrations" not in path.parts
    }
    known = set(files)
    graph: dict[str, set[str]] = {}
    for module, path in files.items():
        tree = ast.parse(path.read_text())
        # A task's import of the service it calls runs when the task does, never at load.
        deferred = {
            id(node)
            for fn, node in _local_imports(tree)
            if path.name == "tasks.py" and _is_task(fn)
        }
        graph[module] = {
            target
            for node in ast.walk(tree)
            if isinstance(node, (ast.Import, ast.ImportFrom)) and id(node) not in deferred
            for target in _imported_modules(node, known)
            if target != module
        }
    return graph


def _circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for target in graph.get(node, ()):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


@pytest.mark.parametrize("app", [*LAYERS, "sandbox"])
def test_no_import_circle_between_the_modules_of_a_package(app: str) -> None:
    assert _circles(_app_graph(app)) == []


def test_the_circle_check_finds_a_circle() -> None:
    graph = {"a.x": {"a.y"}, "a.y": {"a.z"}, "a.z": {"a.x"}, "a.w": {"a.x"}}
    assert _circles(graph) == [["a.x", "a.y", "a.z"]]


@pytest.mark.parametrize("app", [*LAYERS, "sandbox"])
def test_only_a_task_imports_the_project_inside_a_function(app: str) -> None:
    # The one exception to imports at the top of a module: a Celery task imports the
    # service it calls in its body (services import the task at their top). Anything
    # else would be a circle dodged, or one waiting to form.
    project = {*LAYERS, "sandbox"}
    for path in (ROOT / app).rglob("*.py"):
        if "migrations" in path.parts:
            continue
        for fn, node in _local_imports(ast.parse(path.read_text())):
            module = node.module if isinstance(node, ast.ImportFrom) else node.names[0].name
            if not module or module.split(".")[0] not in project:
                continue
            allowed = path.name == "tasks.py" and _is_task(fn)
            allowed |= path.name == "apps.py" and fn.name == "ready"  # Django's signal hook
            where = f"{path.relative_to(ROOT)}:{node.lineno} in {fn.name}()"
            assert allowed, f"{where} imports {module} inside a function"


# The only module that changes a job's state; a submission inserts the row as ``queued``.
STATE_WRITER = "jobs/services/transitions.py"
STATE_INSERT = "jobs/services/submit.py"


def _state_writes(tree: ast.Module) -> Iterator[tuple[int, str]]:
    """Where code writes a ``state`` column: ``.update(state=…)``, ``.create(state=…)``,
    ``x.state = …``, ``save``/``bulk_update`` naming the field, or SQL that sets it."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            method = node.func.attr
            keywords = {k.arg for k in node.keywords}
            if method in ("update", "update_or_create") and "state" in keywords:
                yield node.lineno, "update"
            elif method in ("create", "get_or_create") and "state" in keywords:
                yield node.lineno, "insert"
            elif method in ("save", "bulk_update") and "'state'" in ast.unparse(node):
                yield node.lineno, "update"
        elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if any(isinstance(t, ast.Attribute) and t.attr == "state" for t in targets):
                yield node.lineno, "update"
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            sql = " ".join(node.value.lower().split())
            if "update jobs_job set" in sql and " state =" in sql.split(" where ")[0]:
                yield node.lineno, "update"


def _state_writers() -> set[str]:
    found = set()
    for app in APPS:
        for path in (ROOT / app).rglob("*.py"):
            if "migrations" in path.parts:
                continue
            relative = str(path.relative_to(ROOT))
            for line, kind in _state_writes(ast.parse(path.read_text())):
                if not (
                    relative == STATE_WRITER or (relative == STATE_INSERT and kind == "insert")
                ):
                    found.add(f"{relative}:{line}")
    return found


def test_one_function_writes_a_jobs_state() -> None:
    # Cancel, the idle stop, admission's evictions, apply, tracking and hardware failures
    # all move a job through jobs.services.transitions (a conditional UPDATE and its
    # timeline entry): written anywhere else, a concurrent cancel could be undone.
    assert _state_writers() == set()


@pytest.mark.parametrize(
    "code",
    [
        "Job.objects.filter(pk=1).update(state='cancelled')",
        "job.state = JobState.CANCELLED",
        "job.save(update_fields=['state', 'reason'])",
        "Job.objects.bulk_update(jobs, ['state'])",
        "cursor.execute('UPDATE jobs_job SET state = %s WHERE id = %s')",
    ],
)
def test_the_state_check_sees_each_way_of_writing_it(code: str) -> None:
    assert [kind for _, kind in _state_writes(ast.parse(code))] == ["update"]


# What decides whether a job's GPUs are idle: the PromQL for it, the portal's rule and a
# team's own. Only monitoring/idleness.py reads them; the panel, the policy and the
# accounting ask it (they once each decided, and disagreed for a team with its own rule).
IDLENESS_MODULE = "monitoring/idleness.py"
IDLE_QUERIES = {"idle_pods", "held_device_peaks", "idle_gpu_seconds"}
IDLE_RULE = {
    "IDLE_GPU_THRESHOLD_PERCENT",
    "IDLE_GPU_WINDOW_MINUTES",
    "idle_threshold_percent",
    "idle_window_minutes",
}


def _idle_deciders(tree: ast.Module) -> Iterator[tuple[int, str]]:
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Load):
            owner = node.value.id if isinstance(node.value, ast.Name) else ""
            if node.attr in IDLE_RULE or (owner == "queries" and node.attr in IDLE_QUERIES):
                yield node.lineno, node.attr
        elif isinstance(node, ast.ImportFrom) and node.module == "monitoring.queries":
            for alias in node.names:
                if alias.name in IDLE_QUERIES:
                    yield node.lineno, alias.name


def test_one_module_decides_idleness() -> None:
    found = {
        f"{path.relative_to(ROOT)}:{line} {name}"
        for app in APPS
        for path in (ROOT / app).rglob("*.py")
        if "migrations" not in path.parts and str(path.relative_to(ROOT)) != IDLENESS_MODULE
        for line, name in _idle_deciders(ast.parse(path.read_text()))
    }
    assert found == set()


def test_the_idleness_check_sees_a_second_decider() -> None:
    code = (
        "t = team.idle_threshold_percent or settings.IDLE_GPU_THRESHOLD_PERCENT\n"
        "q = queries.idle_pods(threshold_percent=t)\n"
        "from monitoring.queries import idle_gpu_seconds\n"
    )
    found = sorted(name for _, name in _idle_deciders(ast.parse(code)))
    assert found == [
        "IDLE_GPU_THRESHOLD_PERCENT",
        "idle_gpu_seconds",
        "idle_pods",
        "idle_threshold_percent",
    ]


def test_no_function_runs_over_80_lines() -> None:
    # A longer function is split into named steps (benchmarks' scripts excepted).
    long = []
    for path in ROOT.rglob("*.py"):
        relative = path.relative_to(ROOT)
        if relative.parts[0] in ("bench", ".venv", "var", "node_modules") or (
            "migrations" in relative.parts
        ):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                lines = (node.end_lineno or node.lineno) - node.lineno + 1
                if lines > 80:
                    long.append(f"{relative}:{node.lineno} {node.name} ({lines} lines)")
    assert long == []


def test_no_selector_imports_a_service() -> None:
    # Reads never depend on writes: a selector that needs what admission decides reads it
    # from jobs.admission, not from the service that takes the locks and writes.
    found = {
        f"{path} imports {name}"
        for app in APPS
        for path, names in imports_of(app).items()
        if "/selectors" in f"/{path}"
        for name in names
        if ".services" in f".{name}" and name.split(".")[0] in APPS
    }
    assert found == set()


# Facts spelled once: each pattern may appear (as source text, comments and docstrings
# included) only in the modules that own the fact; a second copy is how two places drift.
# Each comes with a copy the check must see.
OWNED_ONCE = {
    "queue order": (
        r"priority_value DESC|\"-priority_value\"|priority_value__[gl]t\b",
        {"jobs/models.py"},
        'jobs.filter(Q(priority_value__lt=p)).order_by("-priority_value")',
    ),
    "Kubernetes timestamps": (
        r"\bparse_datetime\b|datetime\.fromisoformat\(",
        {"scheduling/k8s_time.py"},
        "at = parse_datetime(found['at'])",
    ),
    "PriorityClass names": (r"f\"gpu-\{", {"cluster/priority_classes.py"}, 'f"gpu-{priority}"'),
    # Quota units (cores, GiB, devices) ↔ base units ↔ Kubernetes quantities: the quota
    # functions of scheduling.quantity (the manifests' own is a pod's default memory).
    "quota units": (
        r"1024 ?\*\* ?3|\{[^}]*\}Gi\"",
        {"scheduling/quantity.py", "jobs/manifests/resources.py"},
        'values["requests.memory"] = f"{limits[MEMORY]}Gi"',
    ),
    # A job's public fields: the API's output and a notice's payload both come from
    # jobs.selectors.jobs.job_output.
    "a job's public fields": (
        r"\"owner\": job\.owner\.username",
        {"jobs/selectors/jobs.py"},
        '"job": {"id": job.pk, "owner": job.owner.username, "state": str(job.state)},',
    ),
    # A job's manifest context: built in one function, once per submission (and per run);
    # the manifests package's docstring shows a builder's caller making one.
    "manifest contexts": (
        r"ManifestContext\(",
        {"jobs/services/submit.py", "jobs/manifests/__init__.py"},
        "ctx = ManifestContext(job_id=job.pk, namespace=team.namespace)",
    ),
    # The live states are what is not final (LIVE_STATES).
    "final states": (
        r"JobState\.(SUCCEEDED|FAILED|CANCELLED), JobState\.(SUCCEEDED|FAILED|CANCELLED)|"
        r"\"(cancelled|succeeded|failed)\", \"(cancelled|succeeded|failed)\"",
        {"jobs/models.py"},
        'exclude(state__in=("cancelled", "succeeded", "failed"))',
    ),
    # Back to the queue after an eviction: job_requeue (and Kueue's, beside it).
    "requeue": (
        r"\"evictions\": job\.evictions \+|evictions=F\(|"
        r"\"evicted_at\": (?!None)|\"earlier_runs\":",
        {"jobs/services/eviction.py"},
        '"evicted_at": timezone.now(), "evictions": job.evictions + 1,',
    ),
}


def owners_of(pattern: str) -> set[str]:
    found = set()
    for package in (*LAYERS, "sandbox"):
        for path in (ROOT / package).rglob("*.py"):
            if "migrations" not in path.parts and re.search(pattern, path.read_text()):
                found.add(str(path.relative_to(ROOT)))
    return found


@pytest.mark.parametrize("fact", list(OWNED_ONCE))
def test_a_fact_is_spelled_in_the_module_that_owns_it(fact: str) -> None:
    pattern, owners, _ = OWNED_ONCE[fact]
    assert owners_of(pattern) == owners


@pytest.mark.parametrize("fact", list(OWNED_ONCE))
def test_the_owned_once_check_sees_a_second_copy(fact: str) -> None:
    pattern, _, copy = OWNED_ONCE[fact]
    assert re.search(pattern, copy)
