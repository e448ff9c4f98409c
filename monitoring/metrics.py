"""The portal's own metrics for Prometheus, at ``/metrics``.

Read from the database (and Redis) at scrape time by a custom collector, not kept in
in-process counters: under gunicorn each worker process would count only its own
requests, and a restart would reset them. Every scrape sees the same, whole numbers.

- ``gpu_portal_jobs{team,state}``: jobs by state (final states included: counters).
- ``gpu_portal_jobs_gpus{team,state}``: GPUs (or slices) of those jobs.
- ``gpu_portal_queue_length{team}``: jobs waiting for quota or a worker.
- ``gpu_portal_admission_wait_seconds``: histogram of ``admitted_at - created_at``.
- ``gpu_portal_notification_deliveries{channel,status}``: notices by channel and outcome
  (``failed`` counts those that gave up; ``retrying`` those waiting for another try).
- ``gpu_portal_reconcile_duration_seconds``: histogram of reconcile runs, which the
  worker reports with ``jobs.tracking.timings.reconcile_timer()`` (kept in Redis, shared by all
  processes).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from datetime import timedelta

import redis
from django.db.models import Count, DurationField, ExpressionWrapper, F, Q, Sum
from prometheus_client.core import (
    CollectorRegistry,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector
from prometheus_client.utils import floatToGoString

from jobs.models import Job, JobState
from jobs.tracking.timings import RECONCILE_BUCKETS, RECONCILE_KEY, reconcile_redis
from notifications.models import Delivery
from teams.models import Team

logger = logging.getLogger(__name__)

ADMISSION_BUCKETS = (1.0, 5.0, 15.0, 60.0, 300.0, 900.0, 3600.0, 4 * 3600.0, 24 * 3600.0)


class PortalCollector(Collector):
    def collect(self) -> Iterable[Metric]:
        yield from self._jobs()
        yield self._deliveries()
        yield self._admission_wait()
        reconcile = self._reconcile()
        if reconcile is not None:
            yield reconcile

    def _deliveries(self) -> Metric:
        family = GaugeMetricFamily(
            "gpu_portal_notification_deliveries",
            "Notification deliveries by channel and status (sent, failed, retrying, …).",
            labels=["channel", "status"],
        )
        rows = (
            Delivery.objects.values_list("destination__channel", "status")
            .annotate(n=Count("id"))
            .order_by()
        )
        for channel, status, count in rows:
            family.add_metric([channel, status], count)
        return family

    def _jobs(self) -> Iterable[Metric]:
        jobs = GaugeMetricFamily(
            "gpu_portal_jobs", "Jobs by team and state.", labels=["team", "state"]
        )
        gpus = GaugeMetricFamily(
            "gpu_portal_jobs_gpus",
            "GPUs (or MIG/shared slices) requested by jobs, by team and state.",
            labels=["team", "state"],
        )
        queue = GaugeMetricFamily(
            "gpu_portal_queue_length", "Queued jobs by team.", labels=["team"]
        )
        rows = Job.objects.values("team__slug", "state").annotate(n=Count("id"), g=Sum("gpu_count"))
        queued: dict[str, int] = {}
        for row in rows.order_by():
            team, state = row["team__slug"], row["state"]
            jobs.add_metric([team, state], row["n"])
            gpus.add_metric([team, state], row["g"] or 0)
            if state == JobState.QUEUED:
                queued[team] = row["n"]
        for slug in Team.objects.values_list("slug", flat=True):
            queue.add_metric([slug], queued.get(slug, 0))
        return [jobs, gpus, queue]

    def _admission_wait(self) -> Metric:
        """Cumulative over every admitted job, so ``rate()``/``histogram_quantile`` work."""
        admitted = Job.objects.filter(admitted_at__isnull=False)
        aggregates = {
            f"le{i}": Count("id", filter=Q(admitted_at__lte=F("created_at") + timedelta(seconds=b)))
            for i, b in enumerate(ADMISSION_BUCKETS)
        }
        counts = admitted.aggregate(total=Count("id"), **aggregates)
        waited = admitted.aggregate(
            s=Sum(
                ExpressionWrapper(F("admitted_at") - F("created_at"), output_field=DurationField())
            )
        )["s"]
        total_wait = waited.total_seconds() if waited else 0.0
        buckets = [
            (floatToGoString(bound), counts[f"le{i}"]) for i, bound in enumerate(ADMISSION_BUCKETS)
        ] + [("+Inf", counts["total"])]
        return HistogramMetricFamily(
            "gpu_portal_admission_wait_seconds",
            "Time from submission (created_at) to admission against quota (admitted_at).",
            buckets=buckets,
            sum_value=total_wait,
        )

    def _reconcile(self) -> Metric | None:
        try:
            stored: dict[bytes, bytes] = reconcile_redis().hgetall(RECONCILE_KEY)  # type: ignore[assignment]
            raw = {k.decode(): v.decode() for k, v in stored.items()}
        except redis.RedisError as exc:
            logger.warning("reconcile metrics unavailable: %s", exc)
            return None
        count = int(raw.get("count", 0))
        buckets = [(floatToGoString(b), int(raw.get(f"le:{b:g}", 0))) for b in RECONCILE_BUCKETS]
        return HistogramMetricFamily(
            "gpu_portal_reconcile_duration_seconds",
            "Duration of the periodic reconcile (jobs.tasks.reconcile_task).",
            buckets=[*buckets, ("+Inf", count)],
            sum_value=float(raw.get("sum", 0.0)),
        )


def registry() -> CollectorRegistry:
    """A registry with only the portal collector: per-process default collectors (GC,
    process memory) would describe whichever gunicorn worker answered the scrape."""
    reg = CollectorRegistry(auto_describe=False)
    reg.register(PortalCollector())
    return reg
