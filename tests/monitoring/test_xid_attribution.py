"""Which failed jobs a GPU's XID struck, decided by a real Prometheus over known series
(backfilled with promtool).

The exporter labels a held GPU's series with its pod, so a GPU that fails under a job shows
two series: the pod's, which ends, and one without a pod that carries the XID from its first
sample. And a GPU is used by one job after another: an XID counts for the job that held the
GPU when it rose, not for an earlier job that held it within the check's window."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from jobs.models import Job
from monitoring import prometheus
from monitoring.gpu_failures import Struck, gpu_failures_find
from tests.monitoring.prometheus_process import PrometheusProcess, start_history_prometheus
from tests.monitoring.test_accounting import SAMPLE, History, device

NOW = datetime(2026, 11, 20, 12, 0, tzinfo=UTC)
XID, UTIL = "DCGM_FI_DEV_XID_ERRORS", "DCGM_FI_DEV_GPU_UTIL"
START = NOW - timedelta(minutes=30)
FIRST_FAULT = NOW - timedelta(minutes=20)  # GPU gpu-a/3 under job "ft-1"
FREED = NOW - timedelta(minutes=12)  # job "bug-2" fails on its own, freeing gpu-a/4
SECOND_FAULT = NOW - timedelta(minutes=5)  # gpu-a/4 under job "ft-3", its next holder
RERUN, RERUN_FAILED = FIRST_FAULT + timedelta(seconds=30), FIRST_FAULT + timedelta(seconds=90)


def held(series: History, node: str, gpu: str, pod: str, xid: float, start: Any, end: Any) -> None:
    labels = device(node, gpu, pod=pod, namespace="team-a")
    series.add(UTIL, labels, 90, start, end)
    series.add(XID, labels, xid, start, end)


@pytest.fixture(scope="module")
def history(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PrometheusProcess]:
    series = History()
    # ft-1 on gpu-a/3 until its GPU falls off the bus; the GPU's series then has no pod
    held(series, "gpu-a", "3", "ft-1-abcde", 0, START, FIRST_FAULT)
    series.add(XID, device("gpu-a", "3"), 79, FIRST_FAULT, NOW)
    # bug-2 on gpu-a/4 fails on its own; ft-3 takes the GPU, which then reports XID 48
    held(series, "gpu-a", "4", "bug-2-fghij", 0, START, FREED)
    series.add(XID, device("gpu-a", "4"), 0, FREED, FREED + timedelta(minutes=1))
    held(series, "gpu-a", "4", "ft-3-klmno", 0, FREED + timedelta(minutes=1), SECOND_FAULT)
    series.add(XID, device("gpu-a", "4"), 48, SECOND_FAULT, NOW)
    # old-4 on gpu-b/0, whose XID 48 is old news, fails on its own
    held(series, "gpu-b", "0", "old-4-pqrst", 48, START, SECOND_FAULT)
    series.add(XID, device("gpu-b", "0"), 48, SECOND_FAULT, NOW)
    # rerun-5 failed on gpu-c/1 (XID 79), ran again on gpu-c/2 and failed on its own there
    held(series, "gpu-c", "1", "rerun-5-uvwxy", 0, START, FIRST_FAULT)
    series.add(XID, device("gpu-c", "1"), 79, FIRST_FAULT, NOW)
    held(series, "gpu-c", "2", "rerun-5-zabcd", 0, RERUN, RERUN_FAILED)
    prom = start_history_prometheus(
        Path(tmp_path_factory.mktemp("xid")), series.openmetrics(), lookback_delta=f"{SAMPLE}s"
    )
    yield prom
    prom.stop()


def failed(name: str, at: datetime, started: datetime | None = None) -> Job:
    """A failed job as the check reads it (its pods are "<object name>-<suffix>")."""
    return Job(
        namespace="team-a", object_name=name, finished_at=at, started_at=started, placement={}
    )


def test_an_xid_counts_for_the_job_that_held_the_gpu_when_it_rose(
    history: PrometheusProcess, settings: Any
) -> None:
    settings.PROMETHEUS_URL = history.url
    prometheus.reset_client()
    try:
        # The job whose GPU fell off the bus under it (found across its pod's series and the
        # one without a pod)
        assert gpu_failures_find(job=failed("ft-1", FIRST_FAULT), now=NOW) == [
            Struck("ft-1-abcde", "gpu-a", "3", 79)
        ]
        # The GPU's next holder, struck later; not the job that held it before and failed on
        # its own, though the XID rose within the check's window
        assert gpu_failures_find(job=failed("ft-3", SECOND_FAULT), now=NOW) == [
            Struck("ft-3-klmno", "gpu-a", "4", 48)
        ]
        assert gpu_failures_find(job=failed("bug-2", FREED), now=NOW) == []
        # A job whose GPU had reported its XID all along failed on its own
        assert gpu_failures_find(job=failed("old-4", SECOND_FAULT), now=NOW) == []
        # A job's second run that failed on its own a minute after its first run's GPU
        # failure is not blamed on that GPU
        rerun = failed("rerun-5", RERUN_FAILED, started=RERUN)
        assert gpu_failures_find(job=rerun, now=NOW) == []
    finally:
        prometheus.reset_client()
