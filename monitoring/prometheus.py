"""The one adapter between the portal and Prometheus's HTTP API.

A plain ``requests.Session`` per process and thread; every call has a timeout
(``PROMETHEUS_TIMEOUT``) and at most one quick retry of a refused connection. The two
kinds of failure are told apart, as Kopf tells temporary from permanent errors:

- ``MetricsUnavailable(reason)``: Prometheus could not answer (unreachable, slow,
  overloaded, a query it could not finish); pages show a "metrics unavailable: <why>"
  panel and the API a 503.
- ``MetricsQueryInvalid``: Prometheus refused a query as malformed (HTTP 400,
  ``bad_data``): the portal built a wrong query, a bug to report (logged, a 500), not
  an outage to wait out.

Why not prometheus-api-client: its query calls decode with ``requests``' own JSON
decoder, a third of orjson's speed on the megabytes a 24 h range over many GPUs
returns; they report a refusal only as a string holding the status and body; and it
has no call for ``/api/v1/alerts``. The HTTP API is three GETs.
"""

from __future__ import annotations

import logging
import math
import os
import threading
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import orjson
import requests
from django.conf import settings
from requests.adapters import HTTPAdapter
from urllib3.util.retry import Retry

from core.errors import ApplicationError

logger = logging.getLogger(__name__)

Labels = dict[str, str]


class MetricsUnavailable(ApplicationError):
    """Prometheus could not answer; ``reason`` says why in words a user can act on."""

    status_code = 503

    def __init__(self, reason: str) -> None:
        super().__init__(f"metrics unavailable: {reason}")
        self.reason = reason


class MetricsQueryInvalid(ApplicationError):
    """Prometheus refused a query the portal built as malformed: a bug, never an outage."""

    status_code = 500

    def __init__(self, error: str) -> None:
        super().__init__(
            f"The portal sent Prometheus a query it refused (a bug, reported in the logs): "
            f"{error[:300]}"
        )


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


def _session() -> requests.Session:
    """One session (and its connection pool) per process and thread, like ``cluster.kube``."""
    key = (os.getpid(), settings.PROMETHEUS_URL)
    cached = getattr(_local, "session", None)
    if cached is None or cached[0] != key:
        session = requests.Session()
        # One retry of a refused/reset connection only: a read timeout is not retried
        # (it would double a slow page), nor is any HTTP status (a bad query stays bad).
        retry = Retry(total=1, connect=1, read=0, status=0, backoff_factor=0.1)
        session.mount(settings.PROMETHEUS_URL, HTTPAdapter(max_retries=retry))
        _local.session = (key, session)
    return _local.session[1]


def reset_client() -> None:
    """Forget the cached session (tests point the portal at another Prometheus)."""
    _local.session = None


def _url() -> str:
    return str(settings.PROMETHEUS_URL).rstrip("/")


def _number(raw: Any) -> float | None:
    value = float(raw)
    return None if math.isnan(value) or math.isinf(value) else value


def _api(path: str, params: dict[str, str] | None = None, timeout: float | None = None) -> Any:
    """The ``data`` of one HTTP API answer.

    Raises ``MetricsQueryInvalid`` for a malformed query (400 ``bad_data``) and
    ``MetricsUnavailable`` for everything else that is not an answer: no connection, no
    answer in time, a 5xx, a query Prometheus could not finish (422), a body that is not
    its JSON.
    """
    url = _url()
    timeout = float(settings.PROMETHEUS_TIMEOUT if timeout is None else timeout)
    try:
        response = _session().get(f"{url}{path}", params=params, timeout=timeout)
    except requests.Timeout as exc:
        raise MetricsUnavailable(f"Prometheus at {url} did not answer within {timeout:g}s") from exc
    except requests.RequestException as exc:
        raise MetricsUnavailable(f"cannot connect to Prometheus at {url}") from exc
    try:
        body = orjson.loads(response.content)
    except orjson.JSONDecodeError as exc:
        raise MetricsUnavailable(
            f"unexpected answer from Prometheus at {url} (HTTP {response.status_code}, not JSON)"
        ) from exc
    if not isinstance(body, dict):
        raise MetricsUnavailable(
            f"unexpected answer from Prometheus at {url} (HTTP {response.status_code}, "
            "not its API's JSON object)"
        )
    if response.status_code == 400 and body.get("errorType") == "bad_data":
        logger.error("Prometheus refused a query the portal built: %s", body.get("error"))
        raise MetricsQueryInvalid(str(body.get("error", "")))
    if response.status_code != 200 or body.get("status") != "success":
        error = str(body.get("error") or f"HTTP {response.status_code}")[:300]
        raise MetricsUnavailable(f"Prometheus at {url} could not answer the query ({error})")
    return body["data"]


def _malformed(exc: Exception) -> str:
    return f"unexpected answer from Prometheus at {_url()} ({type(exc).__name__}: {exc})"


def query(promql: str, *, at: datetime | None = None, timeout: float | None = None) -> list[Sample]:
    """An instant query; ``timeout`` in seconds (default ``PROMETHEUS_TIMEOUT``: a page's)."""
    params = {"query": promql}
    if at is not None:
        params["time"] = f"{at.timestamp():.3f}"
    if timeout is not None:
        # Prometheus gives up too (its own default is 2 minutes), instead of working on.
        params["timeout"] = f"{timeout:g}s"
    try:
        result = _api("/api/v1/query", params, timeout)["result"]
        return [Sample(dict(r["metric"]), _number(r["value"][1])) for r in result]
    except (KeyError, TypeError, ValueError, IndexError) as exc:
        raise MetricsUnavailable(_malformed(exc)) from exc


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
    except (KeyError, TypeError, ValueError, IndexError) as exc:
        raise MetricsUnavailable(_malformed(exc)) from exc


def alerts() -> list[Alert]:
    """Active alerts with their value and annotations (``/api/v1/alerts``)."""
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
    except (KeyError, TypeError, ValueError) as exc:
        raise MetricsUnavailable(_malformed(exc)) from exc
