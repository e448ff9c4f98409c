"""What every dashboard read shares: time windows, device names, pods to jobs."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.db.models import Q
from django.utils import timezone

from jobs.models import Job
from monitoring import queries

PodKey = tuple[str, str]  # (namespace, pod)
MAX_LOOKBACK = timedelta(days=7)
MIN_JOB_WINDOW = timedelta(minutes=5)


@dataclass(frozen=True)
class Window:
    start: datetime
    end: datetime
    step: int  # seconds

    @classmethod
    def last(cls, seconds: float, *, now: datetime) -> Window:
        return cls.between(now - timedelta(seconds=seconds), now)

    @classmethod
    def between(cls, start: datetime, end: datetime) -> Window:
        span = max(1.0, (end - start).total_seconds())
        return cls(start, end, queries.step_for(span))

    def grid(self) -> list[float]:
        """The timestamps Prometheus evaluates a range query at: start, start+step, … ≤ end."""
        first, last = self.start.timestamp(), self.end.timestamp()
        count = int((last - first) // self.step) + 1
        return [first + i * self.step for i in range(count)]


def device_name(labels: dict[str, str]) -> str:
    """``node GPU 3`` (``· MIG 2`` for an instance, ``· pod`` when one holds it)."""
    name = f"{labels.get('node', '?')} GPU {labels.get('gpu', '?')}"
    if labels.get("GPU_I_ID"):
        name += f" MIG {labels['GPU_I_ID']}"
    if labels.get("pod"):
        name += f" · {labels['pod']}"
    return name


# --- Pods → jobs -----------------------------------------------------------------------


def placement_pods(job: Job) -> list[str]:
    return [str(p["name"]) for p in (job.placement or {}).get("pods") or [] if p.get("name")]


def jobs_for_pods(*, pods: Iterable[PodKey], now: datetime | None = None) -> dict[PodKey, Job]:
    """The portal job each (namespace, pod) belongs to.

    1. Candidates: jobs in those namespaces that started and were not finished more
       than a week ago (older pods cannot hold a GPU now).
    2. A pod named in a job's ``placement`` belongs to that job; otherwise to the job
       whose object name prefixes the pod name (the longest such name: ``a-1-2-x`` is a
       pod of ``a-1-2``, not of ``a-1``).
    """
    wanted = set(pods)
    if not wanted:
        return {}
    now = now or timezone.now()
    candidates = list(
        Job.objects.filter(namespace__in={ns for ns, _ in wanted}, started_at__isnull=False)
        .filter(Q(finished_at__isnull=True) | Q(finished_at__gte=now - MAX_LOOKBACK))
        .select_related("team", "owner")
    )
    by_name: dict[PodKey, Job] = {}
    for job in candidates:
        for pod in placement_pods(job):
            by_name[(job.namespace, pod)] = job
    prefixes = sorted(
        ((j.namespace, j.object_name + "-", j) for j in candidates if j.object_name),
        key=lambda item: -len(item[1]),
    )
    found: dict[PodKey, Job] = {}
    for key in wanted:
        namespace, pod = key
        holder = by_name.get(key) or next(
            (j for ns, p, j in prefixes if ns == namespace and pod.startswith(p)), None
        )
        if holder is not None:
            found[key] = holder
    return found
