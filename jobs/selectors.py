"""Reads: jobs scoped to the user's teams, and quota use."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, TypedDict

from django.contrib.auth.models import AnonymousUser, User
from django.core.paginator import Page, Paginator
from django.db.models import Q, QuerySet
from django.utils import timezone

from cluster import kube
from cluster.nodes import cluster_error_text
from core.errors import NotFound
from jobs.manifests import job_id_selector
from jobs.models import ACTIVE_STATES, Job, JobEvent, JobState
from jobs.quota import format_amount, quota_capacity
from teams.models import GpuQuota, Team
from teams.selectors import teams_for_user


def jobs_for_user(
    *,
    user: User | AnonymousUser,
    team: str | None = None,
    state: str | None = None,
    kind: str | None = None,
) -> QuerySet[Job]:
    """Jobs of the user's teams, newest first, optionally filtered."""
    if any("\x00" in value for value in (team, state, kind) if value):
        # No job has a NUL in its team, state or kind, and PostgreSQL refuses to compare one.
        return Job.objects.none()
    jobs = Job.objects.filter(team__in=teams_for_user(user=user)).select_related("team", "owner")
    if team:
        jobs = jobs.filter(team__slug=team)
    if state:
        jobs = jobs.filter(state=state)
    if kind:
        jobs = jobs.filter(kind=kind)
    return jobs


# The job list's page size, in the HTML list and by default in GET /api/v1/jobs/.
JOB_LIST_PAGE_SIZE = 50

# What the HTML job list shows of a job: the JSON columns (spec, manifests, placement,
# demand: ~2.5 KB a job) stay in the database.
JOB_LIST_FIELDS = (
    "name",
    "kind",
    "gpu_count",
    "priority",
    "state",
    "reason",
    "created_at",
    "team__slug",
    "owner__username",
)


def job_list_page(
    *,
    user: User | AnonymousUser,
    number: int | str | None,
    team: str | None = None,
    state: str | None = None,
    kind: str | None = None,
    per_page: int = JOB_LIST_PAGE_SIZE,
) -> Page[Job]:
    """One page of the user's jobs, newest first (an out-of-range page gives the last one).

    1. Count and page over the job ids only: they come from the narrow ``job_list_order``
       and ``job_team_list_order`` indexes, so a deep page's OFFSET no longer reads (and
       sorts) every ~1 KB job row before the page.
    2. Read that page's rows (team and owner joined, only the columns the list shows)
       in one query by id, in the page's order.
    """
    ids = jobs_for_user(user=user, team=team, state=state, kind=kind).values_list("pk", flat=True)
    id_page = Paginator(ids, per_page).get_page(number)
    rows = jobs_in_order(ids=list(id_page), fields=JOB_LIST_FIELDS)
    # The paginator counted ids; the page holds their jobs (the template reads num_pages).
    return Page(rows, id_page.number, id_page.paginator)  # type: ignore[arg-type]


def jobs_in_order(
    *, ids: Sequence[int], fields: Sequence[str] | None = None, defer: Sequence[str] = ()
) -> list[Job]:
    """The jobs with these ids (already scoped to a user), in the order given.

    ``fields`` (``only``) or ``defer`` limit the columns read; a job deleted meanwhile
    is left out.
    """
    jobs = Job.objects.select_related("team", "owner").defer(*defer)
    if fields is not None:
        jobs = jobs.only(*fields)
    found = jobs.in_bulk(ids)
    return [found[pk] for pk in ids if pk in found]


def job_get_for_user(*, user: User | AnonymousUser, job_id: int) -> Job:
    """One job of the user's teams; another team's job is "not found", never "forbidden"."""
    job = jobs_for_user(user=user).filter(pk=job_id).first()
    if job is None:
        raise NotFound("No such job.")
    return job


def team_usage(*, team: Team) -> dict[str, int]:
    """What the team's admitted, unfinished jobs hold, per quota resource (base units)."""
    totals: dict[str, int] = defaultdict(int)
    demands = Job.objects.filter(
        team=team, state__in=ACTIVE_STATES, admitted_at__isnull=False
    ).values_list("demand", flat=True)
    for demand in demands:
        for resource, amount in demand.items():
            totals[resource] += int(amount)
    return dict(totals)


@dataclass(frozen=True)
class QuotaUse:
    resource: str
    limit: int  # in the quota's own unit (devices, cores, GiB)
    used: int  # same unit, rounded up
    used_display: str
    limit_display: str

    @property
    def percent(self) -> int:
        return min(100, round(100 * self.used / self.limit)) if self.limit else 100


def quota_usage(*, team: Team) -> list[QuotaUse]:
    """Each quota of the team with its limit and what admitted jobs hold now."""
    usage = team_usage(team=team)
    rows = []
    for quota in GpuQuota.objects.filter(team=team).order_by("resource"):
        used_base = usage.get(quota.resource, 0)
        unit = quota_capacity(quota.resource, 1)
        used = -(-used_base // unit)  # round up: 500m of cpu is "1 core in use"
        rows.append(
            QuotaUse(
                resource=quota.resource,
                limit=quota.limit,
                used=used,
                used_display=format_amount(quota.resource, used_base),
                limit_display=format_amount(
                    quota.resource, quota_capacity(quota.resource, quota.limit)
                ),
            )
        )
    return rows


def queued_count(*, team: Team) -> int:
    return Job.objects.filter(team=team, state=JobState.QUEUED).count()


# --- Tracking a job: queue position, live pods, logs, timeline -------------------------


@dataclass(frozen=True)
class QueuePosition:
    """Where a queued job stands, and a rough guess of when it may start."""

    team: int  # 1-based, within the team's queue (the order admission walks)
    cluster: int  # 1-based, among every team's queued jobs
    blocking_resource: str | None  # the quota resource the queue waits for; None: none
    estimated_start: datetime | None
    estimate: str  # the estimate in words, honest about what is unknown


NO_DEADLINE = "unknown: running jobs have no deadline"


def _queued_not_admitted() -> QuerySet[Job]:
    return Job.objects.filter(state=JobState.QUEUED, admitted_at__isnull=True)


def _ahead_of(job: Job) -> Q:
    """Jobs admission takes before ``job``: ordered by -priority_value, created_at, id."""
    same_priority = Q(priority_value=job.priority_value)
    return (
        Q(priority_value__gt=job.priority_value)
        | (same_priority & Q(created_at__lt=job.created_at))
        | (same_priority & Q(created_at=job.created_at, pk__lt=job.pk))
    )


def _sum_demands(demands: Iterable[dict[str, Any]]) -> dict[str, int]:
    totals: dict[str, int] = defaultdict(int)
    for demand in demands:
        for resource, amount in demand.items():
            totals[resource] += int(amount)
    return dict(totals)


def _deadline(job: Job) -> datetime | None:
    seconds = (job.spec or {}).get("max_runtime_seconds")
    if job.started_at is None or not seconds:
        return None
    return job.started_at + timedelta(seconds=int(seconds))


def _start_estimate(job: Job, ahead: list[Job]) -> tuple[str | None, datetime | None, str]:
    """(blocking resource, estimated start, estimate in words) for a queued job.

    1. Admission is strict FIFO within priority: the job starts once its own demand
       *and* the demand of every job ahead of it fit the team's quotas.
    2. For each quota that is short, only running jobs with ``max_runtime_seconds``
       will free it at a known time (``started_at + max_runtime_seconds``, when
       the Job's activeDeadlineSeconds stops them); walk those deadlines in order
       until enough is freed.
    3. The latest of those times is the estimate; a short quota that deadlines
       cannot free makes the estimate unknown. Jobs often finish earlier: it is
       a "no later than, if the deadlines hold" guess, not a promise.
    """
    limits = {
        q.resource: quota_capacity(q.resource, q.limit)
        for q in GpuQuota.objects.filter(team_id=job.team_id)
    }
    holders = list(
        Job.objects.filter(
            team_id=job.team_id, state__in=ACTIVE_STATES, admitted_at__isnull=False
        ).only("state", "demand", "spec", "started_at")
    )
    used = _sum_demands(h.demand for h in holders)
    wanted = _sum_demands([*(j.demand for j in ahead), job.demand])
    short = {
        resource: used.get(resource, 0) + amount - limits[resource]
        for resource, amount in wanted.items()
        if resource in limits and used.get(resource, 0) + amount > limits[resource]
    }
    if not short:
        return None, None, "the team's quota has room: waiting for admission to run"
    # Same order as admission's check, so the named resource matches the job's reason.
    blocking = next(r for r in wanted if r in short)
    latest: datetime | None = None
    for resource, missing in short.items():
        freed, when = 0, None
        releases = sorted(
            (deadline, int(h.demand.get(resource, 0)))
            for h in holders
            if h.state == JobState.RUNNING
            and int(h.demand.get(resource, 0)) > 0
            and (deadline := _deadline(h)) is not None
        )
        for deadline, amount in releases:
            freed += amount
            if freed >= missing:
                when = deadline
                break
        if when is None:
            return blocking, None, NO_DEADLINE
        latest = when if latest is None else max(latest, when)
    assert latest is not None
    latest = max(latest, timezone.now())
    return (
        blocking,
        latest,
        f"at the latest when running jobs holding {blocking} reach their max runtime "
        "(they may finish sooner)",
    )


def job_queue_position(*, job: Job) -> QueuePosition | None:
    """Position of a queued, not yet admitted job in its team's queue and cluster-wide,
    with a rough start estimate; None for any other job."""
    if job.state != JobState.QUEUED or job.admitted_at is not None:
        return None
    queued = _queued_not_admitted()
    ahead_in_team = list(queued.filter(_ahead_of(job), team_id=job.team_id).only("pk", "demand"))
    cluster = queued.filter(_ahead_of(job)).count() + 1
    blocking, estimated_start, estimate = _start_estimate(job, ahead_in_team)
    return QueuePosition(
        team=len(ahead_in_team) + 1,
        cluster=cluster,
        blocking_resource=blocking,
        estimated_start=estimated_start,
        estimate=estimate,
    )


class LivePod(TypedDict):
    name: str
    node: str
    phase: str
    ready: bool | None  # None: not known (read from the stored placement)
    restarts: int | None
    state: str  # container state in words: "running", "waiting: ContainerCreating", …


def _container_state(status: dict[str, Any]) -> str:
    state = status.get("state") or {}
    if "running" in state:
        return "running"
    if "waiting" in state:
        return f"waiting: {(state['waiting'] or {}).get('reason') or 'ContainerCreating'}"
    if "terminated" in state:
        terminated = state["terminated"] or {}
        return (
            f"terminated: {terminated.get('reason') or 'Completed'}"
            f" (exit code {terminated.get('exitCode')})"
        )
    return ""


def _live_pod(obj: dict[str, Any]) -> LivePod:
    status = obj.get("status") or {}
    containers = status.get("containerStatuses") or []
    states = [s for s in (_container_state(c) for c in containers) if s]
    return LivePod(
        name=str(obj["metadata"]["name"]),
        node=str((obj.get("spec") or {}).get("nodeName") or ""),
        phase=str(status.get("phase") or "Pending"),
        ready=bool(containers) and all(c.get("ready") for c in containers),
        restarts=sum(int(c.get("restartCount") or 0) for c in containers),
        state="; ".join(states),
    )


def job_pods_live(*, job: Job) -> list[LivePod]:
    """The job's pods as the cluster reports them now, by name.

    Raises ``kube.ClusterError`` when the cluster cannot be read.
    """
    pods = kube.list_all("Pod", namespace=job.namespace, label_selector=job_id_selector(job.pk))
    return sorted((_live_pod(p) for p in pods), key=lambda p: p["name"])


def _stored_pods(job: Job) -> list[LivePod]:
    """The pods the reconciler last saw (``placement``), when the cluster is not asked."""
    return [
        LivePod(
            name=str(p.get("name", "")),
            node=str(p.get("node") or ""),
            phase=str(p.get("phase") or ""),
            ready=None,
            restarts=None,
            state="",
        )
        for p in (job.placement or {}).get("pods") or []
    ]


MAX_LOG_TAIL = 5000


@dataclass(frozen=True)
class PodLog:
    pod: str
    node: str
    log: str
    note: str = ""  # why there is no log for this pod (e.g. its container has not started)


@dataclass(frozen=True)
class JobLogs:
    pods: list[PodLog] = field(default_factory=list)
    error: str | None = None  # "cluster unreachable: …": the logs could not be read
    detail: str | None = None  # why there are no pods to read logs from


def job_log_tail(*, job: Job, tail: int) -> JobLogs:
    """The last ``tail`` lines (bounded to 1..5000) of each of the job's pods.

    Never raises for cluster trouble: the result carries ``error`` instead, so a
    page or API can show "cluster unreachable: …" plainly.
    """
    tail = max(1, min(MAX_LOG_TAIL, tail))
    if job.applied_at is None:
        return JobLogs(detail="The job has not started: no pods exist yet, so there are no logs.")
    try:
        pods = job_pods_live(job=job)
    except kube.ClusterError as exc:
        return JobLogs(error=cluster_error_text(exc))
    logs: list[PodLog] = []
    for pod in pods:
        try:
            text = kube.pod_log(pod["name"], job.namespace, tail_lines=tail)
        except kube.ObjectNotFound:
            continue  # deleted since the list: nothing left to read
        except kube.TemporaryClusterError as exc:
            return JobLogs(pods=logs, error=cluster_error_text(exc))
        except kube.PermanentClusterError as exc:
            # e.g. 400 "container … is waiting to start": the pod has no log yet.
            logs.append(PodLog(pod["name"], pod["node"], "", note=exc.message))
            continue
        # Bounded here too: a server that ignores tailLines must not flood the page.
        lines = text.splitlines()[-tail:]
        logs.append(PodLog(pod["name"], pod["node"], "\n".join(lines)))
    detail = None if logs else "No pods of this job are in the cluster (not created yet, or gone)."
    return JobLogs(pods=logs, detail=detail)


@dataclass(frozen=True)
class JobLive:
    """What the job page shows and refreshes while the job runs."""

    job: Job
    pods: list[LivePod]
    pods_error: str | None
    events: list[JobEvent]
    queue_position: QueuePosition | None


def job_events(*, job: Job) -> QuerySet[JobEvent]:
    """The job's timeline (portal and Kubernetes events), oldest first."""
    return JobEvent.objects.filter(job=job).order_by("created_at", "id")


def job_live_get(*, job: Job) -> JobLive:
    """State, pods, timeline and queue position of one job.

    Pods come from the cluster while the job is applied and not final (with ready,
    restarts and container state); otherwise, or when the cluster cannot be read,
    from what the reconciler last stored, with the error to show beside them.
    """
    pods, pods_error = _stored_pods(job), None
    if job.applied_at is not None and not job.is_final:
        try:
            pods = job_pods_live(job=job)
        except kube.ClusterError as exc:
            pods_error = cluster_error_text(exc)
    return JobLive(
        job=job,
        pods=pods,
        pods_error=pods_error,
        events=list(job_events(job=job)),
        queue_position=job_queue_position(job=job),
    )
