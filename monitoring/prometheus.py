"""The one adapter between the portal and Prometheus.

Built on ``prometheus-api-client``; every call has a timeout (``PROMETHEUS_TIMEOUT``)
and at most one quick retry of a refused connection. Any failure — unreachable,
slow, a refused query, a malformed answer — becomes ``MetricsUnavailable(reason)``,
which pages show as a "metrics unavailable: <why>" panel and the API as a 503.
"""

from __future__ import annotations

import math
import os
import threading
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import orjson
import requests
from django.conf import settings
from prometheus_api_client import PrometheusApiClientException, PrometheusConnect
from urllib3.util.retry import Retry

from core.errors import ApplicationError

Labels = dict[str, str]


class MetricsUnavailable(ApplicationError):
    """Prometheus could not answer; ``reason`` says why in words a user can act on."""

    status_code = 503

    def __init__(self, reason: str) -> None:
        super().__init__(f"metrics unavailable: {reason}")
        self.reason = reason


@dataclass(frozen=True)
class Sample:
    labels: Labels
    value: float | None  # None: NaN (e.g. a ratio over no data)


@dataclass(frozen=True)
class Series:
    labels: Labels
    timestamps: list[float]  # Unix seconds
    values: list[float | None]


@dataclass(frozen=True)
class Alert:
    labels: Labels
    annotations: Labels
    state: str  # firing | pending
    active_at: str
    value: float | None


_local = threading.local()


def _client() -> PrometheusConnect:
    """One client (and its connection pool) per process and thread, like ``portal.kube``."""
    key = (os.getpid(), settings.PROMETHEUS_URL, settings.PROMETHEUS_TIMEOUT)
    cached = getattr(_local, "client", None)
    if cached is None or cached[0] != key:
        # One retry of a refused/reset connection only: a read timeout is not retried
        # (it would double a slow page), nor is any HTTP status (a bad query stays bad).
        retry = Retry(total=1, connect=1, read=0, status=0, backoff_factor=0.1)
        client = PrometheusConnect(
            url=settings.PROMETHEUS_URL.rstrip("/"),
            retry=retry,
            timeout=settings.PROMETHEUS_TIMEOUT,
        )
        _local.client = (key, client)
    return _local.client[1]


def reset_client() -> None:
    """Forget the cached client (tests point the portal at another Prometheus)."""
    _local.client = None


def _reason(exc: Exception) -> str:
    url = settings.PROMETHEUS_URL
    if isinstance(exc, requests.Timeout):
        return f"Prometheus at {url} did not answer within {settings.PROMETHEUS_TIMEOUT:g}s"
    if isinstance(exc, requests.ConnectionError):
        return f"cannot connect to Prometheus at {url}"
    if isinstance(exc, PrometheusApiClientException):
        return f"Prometheus at {url} refused the query ({str(exc)[:300]})"
    return f"unexpected answer from Prometheus at {url} ({type(exc).__name__}: {exc})"


def _number(raw: Any) -> float | None:
    value = float(raw)
    return None if math.isnan(value) or math.isinf(value) else value


def _api(path: str, params: dict[str, str] | None = None) -> Any:
    """GET an HTTP API path through the client's session (its URL, headers, auth, retry
    and timeout), decoded by orjson: a 24 h range over many GPUs is megabytes of JSON,
    which ``requests``' own decoder reads at a third of the speed. Raises what the client
    raises (``PrometheusApiClientException`` for a refusal)."""
    client = _client()
    response = client._session.get(
        f"{client.url}{path}",
        params=params,
        headers=client.headers,
        auth=client.auth,
        timeout=settings.PROMETHEUS_TIMEOUT,
    )
    if response.status_code != 200:
        raise PrometheusApiClientException(
            f"HTTP Status Code {response.status_code} ({response.content!r})"
        )
    return orjson.loads(response.content)["data"]


def query(promql: str, *, at: datetime | None = None) -> list[Sample]:
    """An instant query."""
    params = {"query": promql}
    if at is not None:
        params["time"] = f"{at.timestamp():.3f}"
    try:
        result = _api("/api/v1/query", params)["result"]
        return [Sample(dict(r["metric"]), _number(r["value"][1])) for r in result]
    except (requests.RequestException, PrometheusApiClientException) as exc:
        raise MetricsUnavailable(_reason(exc)) from exc
    except (KeyError, TypeError, ValueError, IndexError) as exc:
        raise MetricsUnavailable(_reason(exc)) from exc


def query_range(promql: str, *, start: datetime, end: datetime, step: int) -> list[Series]:
    """A range query; ``step`` in seconds (see ``queries.step_for``)."""
    params = {
        "query": promql,
        "start": str(round(start.timestamp())),
        "end": str(round(end.timestamp())),
        "step": f"{step}s",
    }
    try:
        result = _api("/api/v1/query_range", params)["result"]
        return [
            Series(
                dict(r["metric"]),
                [float(t) for t, _ in r["values"]],
                [_number(v) for _, v in r["values"]],
            )
            for r in result
        ]
    except (requests.RequestException, PrometheusApiClientException) as exc:
        raise MetricsUnavailable(_reason(exc)) from exc
    except (KeyError, TypeError, ValueError, IndexError) as exc:
        raise MetricsUnavailable(_reason(exc)) from exc


def alerts() -> list[Alert]:
    """Active alerts with their value and annotations (``/api/v1/alerts``).

    prometheus-api-client has no call for this endpoint; ``_api`` sends it like the
    queries.
    """
    try:
        items = _api("/api/v1/alerts")["alerts"]
        return [
            Alert(
                labels=dict(a.get("labels") or {}),
                annotations=dict(a.get("annotations") or {}),
                state=str(a.get("state", "")),
                active_at=str(a.get("activeAt", "")),
                value=_number(a["value"]) if a.get("value") not in (None, "") else None,
            )
            for a in items
        ]
    except (requests.RequestException, PrometheusApiClientException) as exc:
        raise MetricsUnavailable(_reason(exc)) from exc
    except (KeyError, TypeError, ValueError) as exc:
        raise MetricsUnavailable(_reason(exc)) from exc
