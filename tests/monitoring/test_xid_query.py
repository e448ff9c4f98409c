"""Which GPUs reported a new XID in a window: the query the GPU-failure check rests on, run by
a real Prometheus over known series (backfilled with promtool).

The exporter labels a held GPU's series with its pod, so a GPU that fails under a job shows
two series: the pod's, which ends at 0, and one without a pod that carries the XID from its
first sample. The change is between the series, not within one."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from monitoring import prometheus, queries
from tests.monitoring.prometheus_process import PrometheusProcess, start_history_prometheus
from tests.monitoring.test_accounting import SAMPLE, History, device

NOW = datetime(2026, 11, 20, 12, 0, tzinfo=UTC)
XID = "DCGM_FI_DEV_XID_ERRORS"


@pytest.fixture(scope="module")
def history(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PrometheusProcess]:
    series = History()
    start, fault = NOW - timedelta(minutes=20), NOW - timedelta(minutes=8)
    # A GPU that failed under a job: the pod's series at 0, then one without a pod at 79
    series.add(XID, device("gpu-a", "3", pod="ft-1-abcde", namespace="team-a"), 0, start, fault)
    series.add(XID, device("gpu-a", "3"), 79, fault, NOW)
    # A GPU whose XID 48 is old news: the same code before and after its job
    series.add(XID, device("gpu-a", "4", pod="ft-2-abcde", namespace="team-a"), 48, start, fault)
    series.add(XID, device("gpu-a", "4"), 48, fault, NOW)
    # An idle GPU that failed: one series, 0 then 94
    series.add(XID, device("gpu-b", "0"), 0, start, fault)
    series.add(XID, device("gpu-b", "0"), 94, fault, NOW)
    # A healthy GPU
    series.add(XID, device("gpu-b", "1"), 0, start, NOW)
    prom = start_history_prometheus(
        Path(tmp_path_factory.mktemp("xid")), series.openmetrics(), lookback_delta=f"{SAMPLE}s"
    )
    yield prom
    prom.stop()


def test_a_new_xid_is_found_across_the_pods_series_and_an_old_one_is_not(
    history: PrometheusProcess, settings: Any
) -> None:
    settings.PROMETHEUS_URL = history.url
    prometheus.reset_client()
    # When the check looks at the last 15 minutes
    found = {
        (s.labels["Hostname"], s.labels["gpu"]): s.value
        for s in prometheus.query(queries.new_xid_errors(15 * 60), at=NOW)
    }
    prometheus.reset_client()
    # Then the GPU that failed under a job and the idle one that failed are found, with
    # their codes; the GPU whose XID was there all along and the healthy one are not
    assert found == {("gpu-a", "3"): 79, ("gpu-b", "0"): 94}
