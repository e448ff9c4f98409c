"""GPU-hour accounting against a real Prometheus serving known DCGM series.

The series are written as OpenMetrics and backfilled with promtool (``start_history_
prometheus``), so every figure is known in advance: a whole GPU at 40% across midnight, a
MIG slice at 25% engine activity, one time-sliced GPU at 60% shared by two pods, a GPU at
2% (idle), a GPU no pod holds, another namespace's pod. The portal's time zone is
Asia/Kolkata (UTC+5:30): days begin at the local midnight, on a half hour of UTC.
"""

from __future__ import annotations

import json
import urllib.parse
import urllib.request
from collections.abc import Iterator
from datetime import date, datetime, timedelta
from decimal import Decimal
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from django.core.management import call_command
from django.utils import timezone

from jobs.models import Job, JobEvent
from monitoring import prometheus
from monitoring.accounting import day_bounds, rollup_days_due, usage_rollup, usage_rollup_day
from monitoring.models import GpuPrice, GpuUsageDay, RollupDay
from teams.models import Team
from tests.factories import JobFactory, TeamFactory, UserFactory
from tests.monitoring.prometheus_process import PrometheusProcess, start_history_prometheus

ZONE = "Asia/Kolkata"
SAMPLE = 15  # seconds between the history's samples
A100 = "NVIDIA-A100-SXM4-80GB"
T4 = "Tesla-T4"


def _local(day: date, hour: int, minute: int = 0) -> datetime:
    return day_bounds(day)[0] + timedelta(hours=hour, minutes=minute)


class History:
    """The known series: ``add`` writes one device's samples every 15 s over (start, end]."""

    def __init__(self) -> None:
        self.lines: dict[str, list[str]] = {}

    def add(
        self, metric: str, labels: dict[str, str], value: float, start: datetime, end: datetime
    ) -> None:
        text = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
        t = start.timestamp() + SAMPLE
        while t <= end.timestamp():
            self.lines.setdefault(metric, []).append(f"{metric}{{{text}}} {value} {t:.0f}")
            t += SAMPLE

    def openmetrics(self) -> str:
        out = []
        for metric, samples in self.lines.items():
            out.append(f"# TYPE {metric} gauge")
            out += samples
        return "\n".join(out) + "\n# EOF\n"


def device(node: str, gpu: str, pod: str = "", namespace: str = "", **extra: str) -> dict[str, str]:
    labels = {"Hostname": node, "gpu": gpu, "UUID": f"GPU-{node}-{gpu}", **extra}
    if pod:
        labels |= {"pod": pod, "namespace": namespace, "container": "main"}
    return labels


@pytest.fixture(scope="module")
def timeline() -> dict[str, Any]:
    """The days and instants every series and job row is placed at (three days back, so
    the history is old news to Prometheus, and 'now' is fixed)."""
    kolkata = ZoneInfo(ZONE)
    now = datetime.now(kolkata).replace(second=0, microsecond=0)
    day = now.date() - timedelta(days=3)
    midnight = datetime.combine(day + timedelta(days=1), datetime.min.time(), tzinfo=kolkata)
    return {
        "now": now,
        "day": day,
        "next": day + timedelta(days=1),
        "midnight": midnight,
        "zone": kolkata,
    }


@pytest.fixture(scope="module")
def history_prometheus(
    timeline: dict[str, Any], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[PrometheusProcess]:
    midnight = timeline["midnight"]
    day_start = midnight - timedelta(days=1)
    now = timeline["now"]
    history = History()
    util = "DCGM_FI_DEV_GPU_UTIL"
    # A whole GPU at 40% from 23:00 to 01:00: half on each day.
    history.add(
        util,
        device("node-1", "0", "wide-1001-abcde", "team-alpha"),
        40,
        midnight - timedelta(hours=1),
        midnight + timedelta(hours=1),
    )
    # A MIG slice (1g.10gb) at 25% engine activity, 10:00–12:00.
    history.add(
        "DCGM_FI_PROF_GR_ENGINE_ACTIVE",
        device(
            "node-1", "1", "slice-1002-xyz12", "team-alpha", GPU_I_ID="2", GPU_I_PROFILE="1g.10gb"
        ),
        0.25,
        day_start + timedelta(hours=10),
        day_start + timedelta(hours=12),
    )
    # One time-sliced T4 at 60%, shared by two pods (DCGM repeats it per pod), 08:00–09:00.
    for pod in ("share-1003-aaaaa", "share-1004-bbbbb"):
        history.add(
            util,
            device("node-2", "3", pod, "team-beta"),
            60,
            day_start + timedelta(hours=8),
            day_start + timedelta(hours=9),
        )
    # An idle GPU: 2% from 14:00 to 16:00 (threshold 5%).
    history.add(
        util,
        device("node-2", "5", "idle-1005-ccccc", "team-beta"),
        2,
        day_start + timedelta(hours=14),
        day_start + timedelta(hours=16),
    )
    # Not the portal's: a free GPU, and a pod of a namespace no team has.
    history.add(util, device("node-2", "6"), 90, day_start, midnight)
    history.add(util, device("node-2", "7", "dns-1-zzzzz", "kube-system"), 90, day_start, midnight)
    # A job running now (since 40 minutes ago) at 80%, its samples up to two minutes ago.
    history.add(
        util,
        device("node-3", "0", "live-1006-ddddd", "team-beta"),
        80,
        now - timedelta(minutes=40),
        now - timedelta(minutes=2),
    )
    prom = start_history_prometheus(
        tmp_path_factory.mktemp("history"), history.openmetrics(), lookback_delta=f"{SAMPLE}s"
    )
    yield prom
    prom.stop()


@pytest.fixture
def metrics(history_prometheus: PrometheusProcess, settings: Any) -> Iterator[PrometheusProcess]:
    settings.PROMETHEUS_URL = history_prometheus.url
    settings.TIME_ZONE = ZONE
    settings.IDLE_GPU_THRESHOLD_PERCENT = 5.0
    settings.ACCOUNTING_STEP_SECONDS = 60
    prometheus.reset_client()
    yield history_prometheus
    prometheus.reset_client()


def instant(prom: PrometheusProcess, promql: str, at: datetime) -> float:
    query = urllib.parse.urlencode({"query": promql, "time": f"{at.timestamp():.0f}"})
    with urllib.request.urlopen(f"{prom.url}/api/v1/query?{query}", timeout=10) as resp:
        result = json.load(resp)["data"]["result"]
    return float(result[0]["value"][1]) if result else 0.0


def _job(
    pk: int,
    team: Team,
    owner: Any,
    name: str,
    start: datetime,
    end: datetime | None,
    gpu: dict[str, Any],
    product: str,
) -> Job:
    return JobFactory(
        pk=pk,
        team=team,
        owner=owner,
        name=name,
        object_name=f"{name}-{pk}",
        state="running" if end is None else "succeeded",
        spec={"team": team.slug, "name": name, "kind": "training", "gpu": {"count": 1, **gpu}},
        placement={"gpu_product": product},
        started_at=start,
        finished_at=end,
    )


@pytest.fixture
def jobs(db: Any, timeline: dict[str, Any]) -> dict[str, Job]:
    midnight, now = timeline["midnight"], timeline["now"]
    day_start = midnight - timedelta(days=1)
    alpha = TeamFactory(slug="alpha", namespace="team-alpha")
    beta = TeamFactory(slug="beta", namespace="team-beta")
    ada, bo = UserFactory(username="ada"), UserFactory(username="bo")

    whole = {"sharing": "exclusive", "product": A100}
    return {
        "wide": _job(
            1001,
            alpha,
            ada,
            "wide",
            midnight - timedelta(hours=1),
            midnight + timedelta(hours=1),
            whole,
            A100,
        ),
        "slice": _job(
            1002,
            alpha,
            ada,
            "slice",
            day_start + timedelta(hours=10),
            day_start + timedelta(hours=12),
            {"sharing": "mig", "mig_profile": "1g.10gb"},
            A100,
        ),
        "share1": _job(
            1003,
            beta,
            bo,
            "share",
            day_start + timedelta(hours=8),
            day_start + timedelta(hours=9),
            {"sharing": "shared"},
            T4,
        ),
        "share2": _job(
            1004,
            beta,
            bo,
            "share",
            day_start + timedelta(hours=8),
            day_start + timedelta(hours=9),
            {"sharing": "shared"},
            T4,
        ),
        "idle": _job(
            1005,
            beta,
            bo,
            "idle",
            day_start + timedelta(hours=14),
            day_start + timedelta(hours=16),
            whole,
            A100,
        ),
        "live": _job(1006, beta, bo, "live", now - timedelta(minutes=40), None, whole, A100),
    }


def rows(day: date) -> dict[str, GpuUsageDay]:
    return {row.job_name: row for row in GpuUsageDay.objects.filter(day=day)}


def test_rollup_matches_the_known_series(
    metrics: PrometheusProcess, jobs: dict[str, Job], timeline: dict[str, Any]
) -> None:
    day, following, now = timeline["day"], timeline["next"], timeline["now"]
    usage_rollup_day(day=day, now=now)
    usage_rollup_day(day=following, now=now)
    first, second = rows(day), rows(following)

    # A whole GPU at 40% for 23:00–01:00: one GPU-hour allocated and 0.4 used on each day.
    for part in (first["wide-1001"], second["wide-1001"]):
        assert part.product == A100
        assert part.gpu_hours_allocated == pytest.approx(1.0)
        assert part.gpu_hours_used == pytest.approx(0.4)
        assert part.idle_gpu_hours == pytest.approx(0.0)
    # MIG: two slice-hours at 25% engine activity.
    mig = first["slice-1002"]
    assert (mig.product, mig.gpu_hours_allocated) == ("mig-1g.10gb", pytest.approx(2.0))
    assert mig.gpu_hours_used == pytest.approx(0.5)
    # Time-sliced: each sharing job is charged the whole GPU's 60% (DCGM cannot split it).
    for name in ("share-1003", "share-1004"):
        assert first[name].product == f"shared:{T4}"
        assert first[name].gpu_hours_allocated == pytest.approx(1.0)
        assert first[name].gpu_hours_used == pytest.approx(0.6)
    # Idle: two hours held at 2%, all of them under the 5% threshold.
    idle = first["idle-1005"]
    assert idle.gpu_hours_used == pytest.approx(0.04)
    assert idle.idle_gpu_hours == pytest.approx(2.0)
    # Nothing for the free GPU or the other namespace's pod; the team and owner are the job's.
    assert set(first) == {"wide-1001", "slice-1002", "share-1003", "share-1004", "idle-1005"}
    assert (first["idle-1005"].team.slug, first["idle-1005"].user.username) == ("beta", "bo")
    assert RollupDay.objects.get(day=day).complete and RollupDay.objects.get(day=day).measured

    # The same figures as Prometheus computes them with a plain query over the whole day.
    end = day_bounds(day)[1]
    wide = 'DCGM_FI_DEV_GPU_UTIL{pod="wide-1001-abcde"}'
    assert first["wide-1001"].gpu_hours_used == pytest.approx(
        instant(metrics, f"sum_over_time({wide}[1d:1m]) * 60 / 100 / 3600", end)
    )
    slice_series = 'DCGM_FI_PROF_GR_ENGINE_ACTIVE{pod="slice-1002-xyz12"}'
    assert mig.gpu_hours_used == pytest.approx(
        instant(metrics, f"sum_over_time({slice_series}[1d:1m]) * 60 / 3600", end)
    )


def test_a_running_job_counts_up_to_now(
    metrics: PrometheusProcess, jobs: dict[str, Job], timeline: dict[str, Any]
) -> None:
    now = timeline["now"]
    today = now.date()
    result = usage_rollup_day(day=today, now=now)
    live = rows(today)["live-1006"]
    held_from = max(jobs["live"].started_at, day_bounds(today)[0])
    assert live.gpu_hours_allocated == pytest.approx((now - held_from).total_seconds() / 3600)
    # 80% from its start to two minutes ago (its last sample).
    worked = (now - timedelta(minutes=2) - held_from).total_seconds() / 3600
    assert live.gpu_hours_used == pytest.approx(0.8 * worked)
    assert not result.complete  # today goes on: the next run does it again
    assert not RollupDay.objects.get(day=today).complete


def test_rollup_twice_gives_the_same_rows_and_a_rebuilt_day_matches(
    metrics: PrometheusProcess, jobs: dict[str, Job], timeline: dict[str, Any]
) -> None:
    day, now = timeline["day"], timeline["now"]
    GpuPrice.objects.create(
        product=A100, price_per_gpu_hour=Decimal("2.50"), effective_from=day - timedelta(days=30)
    )
    GpuPrice.objects.create(
        product=A100, price_per_gpu_hour=Decimal("3.00"), effective_from=day + timedelta(days=1)
    )

    def snapshot() -> list[tuple[Any, ...]]:
        return list(
            GpuUsageDay.objects.filter(day=day)
            .order_by("id")
            .values_list(
                "id",
                "job_id",
                "team_id",
                "user_id",
                "product",
                "gpu_hours_allocated",
                "gpu_hours_used",
                "idle_gpu_hours",
                "cost",
            )
        )

    usage_rollup_day(day=day, now=now)
    once = snapshot()
    usage_rollup_day(day=day, now=now)
    assert snapshot() == once
    # The price in effect that day: 2.50 for the A100's hour (3.00 starts the day after).
    assert rows(day)["wide-1001"].cost == Decimal("2.5000")
    assert rows(day)["slice-1002"].cost is None  # no price for the MIG profile

    # Re-build after the rows were damaged and one lost: the same figures come back.
    GpuUsageDay.objects.filter(day=day, job_name="wide-1001").update(gpu_hours_used=99.0, cost=None)
    GpuUsageDay.objects.filter(day=day, job_name="idle-1005").delete()
    GpuUsageDay.objects.create(
        day=day,
        job=jobs["live"],
        job_name="live-1006",
        team=jobs["live"].team,
        user=jobs["live"].owner,
        product=A100,
        gpu_hours_allocated=5.0,
        rolled_up_at=now,
    )  # a job that did not run that day
    call_command("accounting_rollup", "--day", str(day), stdout=open("/dev/null", "w"))  # noqa: SIM115
    rebuilt = {row[1]: row[2:] for row in snapshot()}
    assert rebuilt == {row[1]: row[2:] for row in once}


def test_prometheus_down_keeps_allocation_and_leaves_the_day_to_measure(
    metrics: PrometheusProcess, jobs: dict[str, Job], timeline: dict[str, Any], settings: Any
) -> None:
    day, now = timeline["day"], timeline["now"]
    settings.PROMETHEUS_URL = "http://127.0.0.1:9"  # nothing listens there
    prometheus.reset_client()
    result = usage_rollup_day(day=day, now=now)
    assert not result.measured and "cannot connect" in result.error
    wide = rows(day)["wide-1001"]
    assert wide.gpu_hours_allocated == pytest.approx(1.0)
    assert (wide.gpu_hours_used, wide.idle_gpu_hours) == (None, None)  # unknown, not zero
    assert day in rollup_days_due(now=now)  # to be measured again

    settings.PROMETHEUS_URL = metrics.url
    prometheus.reset_client()
    usage_rollup(now=now)
    assert rows(day)["wide-1001"].gpu_hours_used == pytest.approx(0.4)
    assert RollupDay.objects.get(day=day).complete
    assert day not in rollup_days_due(now=now)


def test_evicted_runs_and_scaled_to_zero_hours_are_accounted(db: Any, settings: Any) -> None:
    """Allocation comes from the job rows: an evicted run still counts, a deployment the idle
    policy kept at zero replicas does not (Prometheus down: allocation only)."""
    settings.PROMETHEUS_URL = "http://127.0.0.1:9"
    settings.TIME_ZONE = "UTC"
    prometheus.reset_client()
    day = date(2026, 11, 2)
    start = day_bounds(day)[0]
    evicted = JobFactory(
        object_name="ev-1",
        state="running",
        gpu_count=2,
        earlier_runs=[
            [(start + timedelta(hours=1)).isoformat(), (start + timedelta(hours=2)).isoformat()]
        ],
        started_at=start + timedelta(hours=5),
        finished_at=start + timedelta(hours=8),
    )
    served = JobFactory(
        object_name="inf-2",
        kind="inference",
        state="running",
        gpu_count=1,
        started_at=start,
        finished_at=None,
    )
    for hour, reason in ((2, "IdleStopped"), (6, "Resumed"), (20, "IdleStopped")):
        event = JobEvent.objects.create(job=served, reason=reason)
        JobEvent.objects.filter(pk=event.pk).update(created_at=start + timedelta(hours=hour))
    usage_rollup_day(day=day, now=start + timedelta(days=3))
    found = {row.job_id: row for row in GpuUsageDay.objects.filter(day=day)}
    assert found[evicted.pk].gpu_hours_allocated == pytest.approx(2 * (1 + 3))
    # 0–2 h and 6–20 h held; scaled to zero 2–6 h and from 20 h on.
    assert found[served.pk].gpu_hours_allocated == pytest.approx(2 + 14)


def test_rollup_task_catches_up_oldest_first_and_redoes_today(
    metrics: PrometheusProcess, jobs: dict[str, Job], timeline: dict[str, Any]
) -> None:
    now = timeline["now"]
    first_day = timezone.localdate(min(j.started_at for j in jobs.values()))
    due = rollup_days_due(now=now)
    assert due[0] == first_day and due[-1] == now.date()
    done = usage_rollup(now=now, limit=1)
    assert [r.day for r in done] == [first_day, now.date()]
    assert rollup_days_due(now=now)[0] == first_day + timedelta(days=1)


def test_the_management_command_refuses_bad_days(db: Any) -> None:
    from django.core.management.base import CommandError

    with pytest.raises(CommandError, match="YYYY-MM-DD"):
        call_command("accounting_rollup", "--day", "02/11/2026")
    with pytest.raises(CommandError, match="before --start"):
        call_command("accounting_rollup", "--start", "2026-11-05", "--end", "2026-11-01")
    assert not GpuUsageDay.objects.exists()
