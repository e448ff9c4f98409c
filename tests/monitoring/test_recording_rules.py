"""PROMETHEUS_RECORDING_RULES: the cluster and team lines read the recorded series (the
rules themselves are checked against the raw queries in test_prometheus_config.py and on a
live Prometheus in test_live_metrics.py)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import pytest
from django.contrib.auth.models import User

from monitoring import prometheus, queries
from monitoring.prometheus import Alert, Sample, Series
from monitoring.selectors.cluster import cluster_overview_get
from monitoring.selectors.team import team_usage_get


@pytest.fixture
def sent(monkeypatch: pytest.MonkeyPatch, settings: Any) -> list[str]:
    """The PromQL of every range query the portal sends, to a Prometheus with no data."""
    settings.KUBECONFIG = "/nonexistent/kubeconfig"  # no cluster: capacity is not asked for
    ranges: list[str] = []

    def query(promql: str, *, at: datetime | None = None) -> list[Sample]:
        return []

    def query_range(promql: str, *, start: datetime, end: datetime, step: int) -> list[Series]:
        ranges.append(promql)
        return []

    def alerts() -> list[Alert]:
        return []

    monkeypatch.setattr(prometheus, "query", query)
    monkeypatch.setattr(prometheus, "query_range", query_range)
    monkeypatch.setattr(prometheus, "alerts", alerts)
    return ranges


@pytest.mark.parametrize("recorded", [False, True])
def test_the_cluster_and_team_lines_follow_the_setting(
    sent: list[str], settings: Any, demo: dict[str, Any], bob: User, recorded: bool
) -> None:
    # Given a Prometheus that does (or does not) evaluate the shipped recording rules
    settings.PROMETHEUS_RECORDING_RULES = recorded
    vision = demo["teams"]["vision"]

    # When the cluster overview and vision's usage are read over 24 hours
    cluster_overview_get(user=bob, range_key="24h")
    team_usage_get(team=vision, user=bob, range_key="24h")

    # Then the lines come from the recorded series when the rules run, else the raw queries
    assert sent == [
        queries.cluster_utilisation(recorded=recorded),
        queries.team_utilisation(vision.namespace, recorded=recorded),
        queries.team_busy_gpus(vision.namespace, recorded=recorded),
    ]
    assert all(("gpu_portal:" in promql) is recorded for promql in sent)
