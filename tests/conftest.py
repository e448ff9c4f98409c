"""Shared fixtures: the demo catalog and teams, users of each role, API clients."""

from __future__ import annotations

import io
from collections.abc import Iterator
from typing import Any

import pytest
from django.conf import settings as django_settings
from django.contrib.auth.models import User
from django.core.management import call_command
from rest_framework.test import APIClient

from portal.services import api_token_create
from teams.models import Team
from tests.sandbox_process import SandboxProcess, start_sandbox
from tests.worker_process import SHARED, WorkerProcess, redis_reset, shared_workers_stop


@pytest.fixture(autouse=True)
def _fast_password_hashing(settings: Any) -> None:
    # PBKDF2's deliberate slowness is for attackers, not for test fixtures.
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


@pytest.fixture(autouse=True)
def _fresh_redis(request: pytest.FixtureRequest) -> None:
    # A test that did not ask for a worker has none working on its rows; stopped first,
    # since a worker stopping puts the tasks it had fetched back on the queue.
    if "worker" not in request.fixturenames:
        shared_workers_stop()
    # Throttle counters (the cache) and queued tasks (the broker) live in Redis and outlive
    # a test database whose ids restart at 1. (Not ``cache.clear()``: its FLUSHDB would
    # drop the broker's bindings too.)
    for url in {django_settings.REDIS_URL, django_settings.CACHES["default"]["LOCATION"]}:
        redis_reset(url)


@pytest.fixture(scope="session")
def worker_pool() -> Iterator[dict[tuple[tuple[str, str], ...], WorkerProcess]]:
    """The test process's workers by their environment: a module whose worker would be the
    same as an earlier module's (the same database, broker, cluster and settings) takes it
    over rather than starting another (a start costs seconds of CPU in three processes)."""
    workers: dict[tuple[tuple[str, str], ...], WorkerProcess] = {}
    yield workers
    for proc in workers.values():
        SHARED.discard(proc)
        proc.stop()


@pytest.fixture(scope="session")
def local_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SandboxProcess]:
    """The test process's local cluster (the real control plane and the simulated GPU
    nodes, ``sandbox/localcluster.py``), started when a test first needs it. Modules share
    it and leave it as they found it: the portal's objects are deleted after each test
    (``tests/integration/conftest.py::cluster``); a module that stops, restarts or breaks
    the cluster says ``OWN_CLUSTER = True`` and gets its own."""
    proc = start_sandbox(tmp_path_factory.mktemp("local-cluster"), profile="small", speed=30.0)
    yield proc
    proc.stop(timeout=30)


@pytest.fixture
def demo(db: Any) -> dict[str, Any]:
    """The `seed_demo` data: teams vision/nlp/speech/robotics, users alice/bob/carol/dave/
    admin, quotas; vision is taken out of cohort ``research`` so its 16 GPUs are a hard
    limit, as most tests assume (the ``research`` fixture keeps the cohort)."""
    call_command("seed_demo", stdout=io.StringIO())
    Team.objects.filter(slug="vision").update(cohort=None)
    return {
        "teams": {t.slug: t for t in Team.objects.all()},
        "users": {u.username: u for u in User.objects.all()},
    }


@pytest.fixture
def research(db: Any) -> dict[str, Any]:
    """The `seed_demo` data as it is: vision (16 GPUs) and robotics (8) lend each other
    their unused quota in cohort ``research``."""
    call_command("seed_demo", stdout=io.StringIO())
    return {
        "teams": {t.slug: t for t in Team.objects.all()},
        "users": {u.username: u for u in User.objects.all()},
    }


@pytest.fixture
def alice(demo: dict[str, Any]) -> User:
    return demo["users"]["alice"]


@pytest.fixture
def bob(demo: dict[str, Any]) -> User:
    return demo["users"]["bob"]


@pytest.fixture
def carol(demo: dict[str, Any]) -> User:
    return demo["users"]["carol"]


@pytest.fixture
def admin_user(demo: dict[str, Any]) -> User:
    return demo["users"]["admin"]


def api_client_for(user: User) -> APIClient:
    """An API client authenticated with a real bearer token of ``user``."""
    _, secret = api_token_create(user=user, description="tests")
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {secret}")
    return client


@pytest.fixture
def alice_api(alice: User) -> APIClient:
    return api_client_for(alice)


@pytest.fixture
def bob_api(bob: User) -> APIClient:
    return api_client_for(bob)


@pytest.fixture
def carol_api(carol: User) -> APIClient:
    return api_client_for(carol)


def training_spec(**overrides: Any) -> dict[str, Any]:
    """A valid single-GPU training spec for team vision; override any field."""
    spec: dict[str, Any] = {
        "team": "vision",
        "name": "resnet50",
        "kind": "training",
        "image": "nvcr.io/nvidia/pytorch:24.05-py3",
        "command": ["torchrun", "train.py"],
        "args": ["--epochs", "10"],
        "env": {"SEED": "1"},
        "gpu": {"count": 1},
    }
    spec.update(overrides)
    return spec


def inference_spec(**overrides: Any) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "team": "vision",
        "name": "embedder",
        "kind": "inference",
        "image": "ghcr.io/acme/embedder:1.2",
        "gpu": {"count": 1, "sharing": "mig", "mig_profile": "1g.10gb"},
        "replicas": 2,
        "port": 8080,
        "health_path": "/healthz",
    }
    spec.update(overrides)
    return spec


def workspace_spec(**overrides: Any) -> dict[str, Any]:
    """Alice's usual workspace: JupyterLab with PyTorch on a shared T4 slice."""
    spec: dict[str, Any] = {
        "team": "vision",
        "name": "explore",
        "kind": "workspace",
        "workspace_image": "jupyter-pytorch",
        "gpu": {"count": 1, "product": "Tesla-T4", "sharing": "shared"},
        "cpu": "1",
        "memory": "2Gi",
    }
    spec.update(overrides)
    return spec


# A valid spec with every typed field present (inference, so health_path is there too).
FULL_SPEC: dict[str, Any] = {
    "team": "vision",
    "name": "embedder",
    "kind": "inference",
    "image": "ghcr.io/acme/embedder:1.2",
    "command": ["python", "serve.py"],
    "args": ["--port", "8080"],
    "env": {"MODEL": "bert"},
    "gpu": {"count": 1, "sharing": "mig", "mig_profile": "1g.10gb", "product": "A100"},
    "cpu": "2",
    "memory": "8Gi",
    "volumes": [{"claim": "models", "mount_path": "/models", "read_only": True}],
    "replicas": 2,
    "port": 8080,
    "health_path": "/healthz",
}
