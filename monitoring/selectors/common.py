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
    2. ``pods_to_jobs`` among them.
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
    return pods_to_jobs(wanted, candidates)


def pods_to_jobs(pods: Iterable[PodKey], candidates: Iterable[Job]) -> dict[PodKey, Job]:
    """Which of ``candidates`` each (namespace, pod) belongs to: the job naming the pod in
    its ``placement``, else the one whose object name is the longest prefix of the pod name
    up to a dash (``a-1-2-x`` is a pod of ``a-1-2``, not of ``a-1``). One dictionary
    look-up per dash in the pod name, whatever the number of candidates."""
    by_pod: dict[PodKey, Job] = {}
    by_object: dict[PodKey, Job] = {}
    for job in candidates:
        if job.object_name:
            by_object[(job.namespace, job.object_name)] = job
        for pod in placement_pods(job):
            by_pod[(job.namespace, pod)] = job
    found: dict[PodKey, Job] = {}
    for key in pods:
        namespace, pod = key
        holder = by_pod.get(key)
        cut = len(pod)
        while holder is None and (cut := pod.rfind("-", 0, cut)) > 0:
            holder = by_object.get((namespace, pod[:cut]))
        if holder is not None:
            found[key] = holder
    return found
