"""The probes: ``/healthz`` (liveness) and ``/readyz`` (readiness).

Served by ``portal.middleware.ProbeMiddleware`` before any other middleware looks at the
request, and routed in ``portal/urls.py`` too."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

from django.conf import settings
from django.db import connection
from django.http import HttpRequest, JsonResponse
from django.views.decorators.http import require_GET

from cluster import kube
from core.redis_client import redis_client
from monitoring import prometheus

logger = logging.getLogger(__name__)


@require_GET
def healthz(request: HttpRequest) -> JsonResponse:
    """Liveness: the process answers. Nothing outside it is asked, so an outage of the
    database never makes Kubernetes restart every web pod at once."""
    return JsonResponse({"status": "ok"})


def _check(probe: Callable[[], object]) -> dict[str, Any]:
    started = time.perf_counter()
    try:
        probe()
    except Exception as exc:  # noqa: BLE001 - whatever broke, the probe reports it
        result: dict[str, Any] = {"ok": False, "error": str(exc)[:300] or type(exc).__name__}
    else:
        result = {"ok": True}
    result["ms"] = round((time.perf_counter() - started) * 1000, 1)
    return result


def _database() -> None:
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1")


@require_GET
def readyz(request: HttpRequest) -> JsonResponse:
    """Readiness: 200 when the database and Redis (the broker) answer, else 503. The
    cluster and Prometheus are reported too, each within ``READY_CHECK_TIMEOUT``, but are
    not fatal: without them the portal still serves its pages, saying what is missing.
    What failed is logged, not shown: the endpoint is open to anyone who can reach it."""
    timeout = float(settings.READY_CHECK_TIMEOUT)
    checks = {
        "database": _check(_database),
        "redis": _check(lambda: redis_client(timeout=timeout).ping()),
        "cluster": _check(lambda: kube.version(timeout=timeout)),
        "prometheus": _check(lambda: prometheus.query("vector(1)", timeout=timeout)),
    }
    ready = checks["database"]["ok"] and checks["redis"]["ok"]
    for name, check in checks.items():
        # Probes need the status only; what failed, and where, goes to the log.
        error = check.pop("error", None)
        if error:
            logger.warning("readyz: %s: %s", name, error)
    return JsonResponse(
        {"status": "ok" if ready else "error", "checks": checks}, status=200 if ready else 503
    )
