"""`make run` serves the portal as deployed: a burst of API clients all get answers.

The development server's listen backlog is 5: 60 clients at once saw "connection reset".
``scripts/serve.sh`` (what ``make run`` runs) starts gunicorn with ``gunicorn.conf.py``.
"""

from __future__ import annotations

import threading
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings
from django.contrib.auth.models import User

from portal.services import api_token_create
from tests.integration.conftest import _database_url
from tests.monitoring.prometheus_process import free_port
from tests.processes import http_ok, spawn, tail, terminate, wait_ready

REPO = Path(__file__).resolve().parents[2]
CLIENTS = 60

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_burst_of_60_api_clients_gets_60_answers(alice: User, tmp_path: Path) -> None:
    _, secret = api_token_create(user=alice, description="burst")
    port = free_port()
    log = tmp_path / "serve.log"
    env = {
        "DATABASE_URL": _database_url(),
        "REDIS_URL": settings.REDIS_URL,
        "PORTAL_ENV": "development",
        "DEBUG": "false",
    }
    server = spawn(["bash", "scripts/serve.sh", f"127.0.0.1:{port}"], log, env=env, cwd=REPO)
    try:
        base = f"http://127.0.0.1:{port}"
        wait_ready(server, lambda: http_ok(f"{base}/healthz"), what="gunicorn", log_file=log)
        start = threading.Barrier(CLIENTS)

        def call(_: int) -> Any:
            request = urllib.request.Request(
                f"{base}/api/v1/me/", headers={"Authorization": f"Bearer {secret}"}
            )
            start.wait()  # all 60 connect at once
            try:
                with urllib.request.urlopen(request, timeout=60) as response:
                    return response.status
            except (urllib.error.URLError, ConnectionError) as exc:
                return repr(exc)

        with ThreadPoolExecutor(CLIENTS) as pool:
            answers = list(pool.map(call, range(CLIENTS)))
        assert answers == [200] * CLIENTS, tail(log)
    finally:
        terminate(server)
