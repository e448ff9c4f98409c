"""A real sandbox cluster and a real Celery worker for the portal's integration tests."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings as django_settings
from django.contrib.auth.models import User
from django.core.management import CommandError, call_command
from django.db import connection

from cluster import kube
from cluster.labels import MANAGED_BY_SELECTOR
from cluster.launchers import launchers_forget
from portal.services import api_token_create
from teams.models import Team
from teams.services import team_save
from tests.sandbox_process import SandboxProcess, start_sandbox
from tests.worker_process import SHARED, WorkerProcess, wait_for

SANDBOX_SPEED = 30.0


@pytest.fixture(scope="module")
def sandbox(
    tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest
) -> Iterator[SandboxProcess]:
    """The module's local cluster: the test process's shared one, or its own if the module
    says ``OWN_CLUSTER = True`` (it stops, restarts or breaks it)."""
    if not getattr(request.module, "OWN_CLUSTER", False):
        yield request.getfixturevalue("local_cluster")
        return
    proc = start_sandbox(tmp_path_factory.mktemp("cluster"), profile="small", speed=SANDBOX_SPEED)
    yield proc
    proc.stop(timeout=30)


@pytest.fixture
def cluster(sandbox: SandboxProcess, settings: Any) -> Iterator[SandboxProcess]:
    """Point the portal's Kubernetes adapter at the sandbox (through its kubeconfig)."""
    settings.KUBECONFIG = str(sandbox.kubeconfig)
    settings.KUBE_CONTEXT = ""
    settings.KUBE_REQUEST_TIMEOUT = 5.0
    settings.FIT_SNAPSHOT_TTL_SECONDS = 0  # each test's preview sees the cluster as it is
    kube.reset_client()
    yield sandbox
    delete_portal_objects()
    kube.reset_client()


def delete_portal_objects() -> None:
    """Tests share one sandbox per module: free its GPUs for the next test."""
    for kind in ("Job", "Deployment", "PyTorchJob", "TrainJob"):
        for obj in kube.list_all(kind, label_selector=MANAGED_BY_SELECTOR):
            meta = obj["metadata"]
            kube.delete(kind, meta["name"], meta["namespace"], propagation="Background")
    wait_for(lambda: not list(kube.list_all("Pod", label_selector=MANAGED_BY_SELECTOR)), timeout=20)


def _database_url() -> str:
    db = connection.settings_dict
    return (
        f"postgres://{db['USER'] or 'postgres'}@{db['HOST'] or '127.0.0.1'}:"
        f"{db['PORT'] or 5432}/{db['NAME']}"
    )


def worker_settings(sandbox: SandboxProcess) -> dict[str, str]:
    """Environment of a worker that shares the test database, broker and cluster."""
    return {
        "DATABASE_URL": _database_url(),
        "REDIS_URL": django_settings.REDIS_URL,
        "KUBECONFIG": str(sandbox.kubeconfig),
        "KUBE_REQUEST_TIMEOUT": "5",
        # Every 2 s: quick enough for a test's waits, and half the LISTs of every 1 s
        # (six workers at once on two cores; the suite is bound by CPU).
        "RECONCILE_INTERVAL_SECONDS": "2",
        "STALE_QUEUE_SECONDS": "3",
        "LOST_GRACE_SECONDS": "2",
        # The idle rules (jobs' and workspaces') run when a test says so, not on beat's
        # clock: a pass of the worker's would take the stop a test waits to see.
        "IDLE_POLICY_INTERVAL_SECONDS": "3600",
        "WORKSPACE_IDLE_INTERVAL_SECONDS": "3600",
        "ACCOUNTING_INTERVAL_SECONDS": "3600",
        "PROGRESS_INTERVAL_SECONDS": "2",
        "GPU_FAILURE_CHECK_INTERVAL_SECONDS": "3600",
        "CELERY_VISIBILITY_TIMEOUT": "8",
        "PORTAL_ENV": "development",
        "DEBUG": "false",
    }


@pytest.fixture
def worker_env(cluster: SandboxProcess, transactional_db: Any) -> dict[str, str]:
    """For a test that starts its own workers: their environment (the broker is empty:
    ``tests/conftest.py::_fresh_redis``)."""
    return worker_settings(cluster)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    outcome = yield
    report = outcome.get_result()  # type: ignore[attr-defined]
    setattr(item, f"rep_{report.when}", report)


@pytest.fixture(scope="module")
def worker_overrides() -> dict[str, str]:
    """Settings of the module's worker beyond ``worker_settings`` (a module overrides it)."""
    return {}


@pytest.fixture(scope="module")
def module_worker(
    sandbox: SandboxProcess,
    worker_overrides: dict[str, str],
    django_db_setup: Any,  # the test database's name is known
    tmp_path_factory: pytest.TempPathFactory,
    request: pytest.FixtureRequest,
    worker_pool: dict[tuple[tuple[str, str], ...], WorkerProcess],
) -> Iterator[WorkerProcess]:
    """One worker (with beat) for all of a module's tests, and for later modules that want
    the same one: most tests only need one to be there. ``worker`` hands it to each test.
    A module with a cluster of its own stops its worker with it."""
    env = {**worker_settings(sandbox), **worker_overrides}
    key = tuple(sorted(env.items()))
    proc = worker_pool.get(key) or WorkerProcess(tmp_path_factory.mktemp("worker"), env)
    worker_pool[key] = proc
    SHARED.add(proc)
    yield proc
    if getattr(request.module, "OWN_CLUSTER", False):
        del worker_pool[key]
        SHARED.discard(proc)
        proc.stop()


@pytest.fixture
def worker(
    module_worker: WorkerProcess, worker_env: dict[str, str], request: pytest.FixtureRequest
) -> Iterator[WorkerProcess]:
    """The module's worker, on an empty broker and database; what it does for this test
    ends with the test: the tables it works from are emptied before the cluster is cleaned
    up, so it recovers, re-applies and reclaims nothing in between."""
    for other in SHARED - {module_worker}:  # one worker on the test database at a time
        other.stop()
    if not module_worker.alive():
        module_worker.start()  # the module's first test, or one that stopped it
    module_worker.mark()
    yield module_worker
    empty_tables()
    report = getattr(request.node, "rep_call", None)
    if report is not None and report.failed:
        # What the worker saw is the first thing to read when a lifecycle test fails.
        print(f"--- worker log (tail) ---\n{module_worker.tail(6000)}")


def empty_tables() -> None:
    """TRUNCATE every table, as the test database's own teardown does (ids keep counting up,
    so a late task of this test never mistakes the next test's rows for its own). The worker
    is still up: when a task of its and the TRUNCATE deadlock, PostgreSQL fails one of them,
    and a failed TRUNCATE is tried again."""
    for attempt in range(5):
        try:
            call_command(
                "flush",
                verbosity=0,
                interactive=False,
                inhibit_post_migrate=True,
                reset_sequences=False,
            )
            return
        except CommandError:
            if attempt == 4:
                raise
            time.sleep(0.5)


@pytest.fixture
def portal(live_server: Any, cluster: Any) -> dict[str, Any]:
    """The demo data, alice's token, and the live portal's URL."""
    call_command("seed_demo", verbosity=0, stdout=open(os.devnull, "w"))  # noqa: SIM115
    vision = Team.objects.get(slug="vision")
    vision.cohort = None
    team_save(actor=None, team=vision)
    alice = User.objects.get(username="alice")
    _, token = api_token_create(user=alice, description="cli tests")
    return {"url": live_server.url, "token": token, "alice": alice}


@pytest.fixture
def home(tmp_path: Path) -> Path:
    return tmp_path / "home"


@pytest.fixture
def users(worker: WorkerProcess) -> dict[str, User]:
    """The demo's users, vision outside any cohort, and the teams in the cluster (with the
    portal's Trainer runtime and ServiceAccount) before anything is asked or submitted.
    Modules with their own ``users`` override it."""
    call_command("seed_demo", verbosity=0, stdout=open("/dev/null", "w"))  # noqa: SIM115
    vision = Team.objects.get(slug="vision")
    vision.cohort = None
    team_save(actor=None, team=vision)
    call_command("cluster_sync", stdout=open("/dev/null", "w"))  # noqa: SIM115
    launchers_forget()
    return {u.username: u for u in User.objects.all()}
