"""The Prometheus adapter against a real Prometheus: a query the portal got wrong is a bug
to report, not an outage to wait out; an outage is said plainly."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from monitoring import prometheus
from tests.monitoring.conftest import portal_pointed_at
from tests.monitoring.prometheus_process import PrometheusProcess, free_port, start_prometheus


@pytest.fixture(scope="module")
def bare_prometheus(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PrometheusProcess]:
    prom = start_prometheus(tmp_path_factory.mktemp("prometheus"), dcgm_targets=[])
    yield prom
    prom.stop()


@pytest.fixture
def pointed(bare_prometheus: PrometheusProcess, settings: Any) -> Iterator[PrometheusProcess]:
    yield from portal_pointed_at(bare_prometheus, settings)


def test_a_malformed_query_is_reported_as_a_bug_not_as_prometheus_unavailable(
    pointed: PrometheusProcess, caplog: pytest.LogCaptureFixture
) -> None:
    # Given a Prometheus that answers; When the portal sends it a query with a syntax error
    with pytest.raises(prometheus.MetricsQueryInvalid) as refused:
        prometheus.query("sum(DCGM_FI_DEV_GPU_UTIL")

    # Then the error says it is the portal's bug, with Prometheus's own words, and is logged
    assert not isinstance(refused.value, prometheus.MetricsUnavailable)
    assert refused.value.status_code == 500
    assert "a bug" in refused.value.message
    assert "parse error" in refused.value.message
    assert "parse error" in caplog.text
    # And a well-formed query through the same adapter answers
    (sample,) = prometheus.query("vector(3)")
    assert sample.value == 3.0


def test_range_queries_decode_every_point(pointed: PrometheusProcess) -> None:
    from datetime import timedelta

    from django.utils import timezone

    end = timezone.now()
    (series,) = prometheus.query_range(
        "vector(1)", start=end - timedelta(minutes=5), end=end, step=60
    )
    assert len(series.timestamps) == len(series.values) >= 5
    assert set(series.values) == {1.0}


def test_prometheus_down_is_unavailable_with_the_reason(settings: Any) -> None:
    settings.PROMETHEUS_URL = f"http://127.0.0.1:{free_port()}"
    prometheus.reset_client()
    try:
        with pytest.raises(prometheus.MetricsUnavailable, match="cannot connect to Prometheus"):
            prometheus.query("vector(1)")
    finally:
        prometheus.reset_client()
