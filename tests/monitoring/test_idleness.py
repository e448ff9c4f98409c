"""One definition of "idle": the Idle GPUs panel, the idle-GPU policy and the GPU-hour
report agree about the same jobs, for a team with its own threshold and window and for one
with the portal's, decided by a real Prometheus over known series (backfilled)."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from jobs.models import Job
from monitoring import prometheus
from monitoring.accounting import usage_rollup_day
from monitoring.models import GpuUsageDay
from monitoring.selectors.idle import idle_report_get
from monitoring.services import idle_policy_run
from teams.models import Team
from tests.factories import JobFactory, TeamFactory, UserFactory
from tests.monitoring.prometheus_process import PrometheusProcess, start_history_prometheus
from tests.monitoring.test_accounting import SAMPLE, History, device

NOW = datetime(2026, 11, 20, 12, 0, tzinfo=UTC)
DAY = date(2026, 11, 20)
STARTED = NOW - timedelta(minutes=40)
A100 = "NVIDIA-A100-SXM4-80GB"
# Each job's one GPU, at a steady utilisation for its 40 minutes.
UTILISATION = {
    "strict-1": ("team-strict", 20),  # under strict's 30 %: idle by its rule, not by 5 %
    "plain-2": ("team-plain", 20),  # over the portal's 5 %: busy
    "plain-3": ("team-plain", 2),  # under 5 %: idle
}


@pytest.fixture(scope="module")
def history(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PrometheusProcess]:
    series = History()
    for gpu, (name, (namespace, percent)) in enumerate(UTILISATION.items()):
        labels = device("gpu-a", str(gpu), pod=f"{name}-abcde", namespace=namespace)
        series.add("DCGM_FI_DEV_GPU_UTIL", labels, percent, STARTED, NOW)
    prom = start_history_prometheus(
        Path(tmp_path_factory.mktemp("idleness")),
        series.openmetrics(),
        lookback_delta=f"{SAMPLE}s",
    )
    yield prom
    prom.stop()


@pytest.fixture
def jobs(db: Any, history: PrometheusProcess, settings: Any) -> Iterator[dict[str, Job]]:
    settings.PROMETHEUS_URL = history.url
    settings.TIME_ZONE = "UTC"
    settings.IDLE_GPU_THRESHOLD_PERCENT = 5.0
    settings.IDLE_GPU_WINDOW_MINUTES = 30.0
    settings.ACCOUNTING_STEP_SECONDS = 60
    prometheus.reset_client()
    teams = {
        # Its own rule: under 30 % for 10 minutes is idle.
        "team-strict": TeamFactory(
            slug="strict",
            namespace="team-strict",
            idle_policy=Team.IdlePolicy.REPORT,
            idle_threshold_percent=30,
            idle_window_minutes=10,
        ),
        "team-plain": TeamFactory(
            slug="plain", namespace="team-plain", idle_policy=Team.IdlePolicy.REPORT
        ),
    }
    owner = UserFactory(username="ada")
    found = {}
    for name, (namespace, _) in UTILISATION.items():
        short, pk = name.split("-")
        found[name] = JobFactory(
            pk=int(pk),
            team=teams[namespace],
            owner=owner,
            name=short,
            object_name=name,
            state="running",
            placement={"pods": [{"name": f"{name}-abcde"}], "gpu_product": A100},
            spec={
                "team": teams[namespace].slug,
                "name": short,
                "kind": "training",
                "gpu": {"count": 1, "sharing": "exclusive", "product": A100},
            },
            started_at=STARTED,
            admitted_at=STARTED,
        )
    yield found
    prometheus.reset_client()


def test_the_panel_the_policy_and_the_report_agree_on_who_is_idle(
    jobs: dict[str, Job],
) -> None:
    # When the panel is read, the policy runs and the day is rolled up, at the same moment
    panel = idle_report_get(user=jobs["strict-1"].owner, teams=Team.objects.all(), now=NOW)
    policy = idle_policy_run(now=NOW)
    usage_rollup_day(day=DAY, now=NOW)
    report = {row.job_id: row for row in GpuUsageDay.objects.filter(day=DAY)}

    # Then all three find the same jobs idle: the strict team's at 20 % (its own 30 %
    # threshold) and the plain team's at 2 %, never the plain team's at 20 %
    idle = {jobs["strict-1"].pk, jobs["plain-3"].pk}
    assert {row.job.pk for row in panel.jobs} == idle
    assert set(policy.reported) == idle
    assert {pk for pk, row in report.items() if row.idle_gpu_hours} == idle
    assert report[jobs["plain-2"].pk].idle_gpu_hours == 0

    # And each says which rule it applied
    strict = next(row for row in panel.jobs if row.job.pk == jobs["strict-1"].pk)
    assert (strict.rule.threshold_percent, strict.rule.window_minutes) == (30, 10)
    assert strict.peak_utilisation == pytest.approx(20)
    assert (panel.threshold_percent, panel.window_minutes) == (5, 30)  # the portal's
    told = jobs["strict-1"].events.get(reason="IdleGPUs").message
    assert told.startswith("All 1 GPU(s) stayed under 30% utilisation for the last 10 min")
    # And the hours: the whole 40 minutes held under the strict team's threshold
    assert report[jobs["strict-1"].pk].idle_gpu_hours == pytest.approx(40 / 60, abs=0.02)
    assert strict.wasted_gpu_hours == pytest.approx(40 / 60, abs=0.02)
