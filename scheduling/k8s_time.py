"""Kubernetes timestamps: the one parser for the RFC 3339 times the API server, kubelet logs
and Kueue write (``2026-11-20T12:00:00Z``, ``…T12:00:00.123456789Z``)."""

from __future__ import annotations

from datetime import datetime


def parse_time(value: str | None) -> datetime | None:
    """The moment ``value`` names, timezone-aware (fractions beyond microseconds cut); None
    when it is absent or not a timestamp (a log line that only looks like one)."""
    if not value:
        return None
    try:
        moment = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    return moment if moment.tzinfo is not None else None
