"""Reads: jobs scoped to the user's teams, and quota use."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.conf import settings
from django.contrib.auth.models import AnonymousUser, User
from django.core.paginator import Page, Paginator
from django.db.models import Q, QuerySet
from rest_framework import serializers

from cluster.models import Cluster
from core.errors import NotFound
from jobs.models import ACTIVE_STATES, Job, JobEvent, JobState
from jobs.spec import spec_submittable
from scheduling.quantity import quota_base, quota_words
from scheduling.sharing import Cohort, ResourceQuota, TeamShare
from teams.models import GpuQuota, Team
from teams.selectors import teams_for_user


def jobs_for_user(
    *,
    user: User | AnonymousUser,
    team: str | None = None,
    state: str | None = None,
    kind: str | None = None,
    owner: str | None = None,
) -> QuerySet[Job]:
    """Jobs of the user's teams, newest first, optionally filtered."""
    if any("\x00" in value for value in (team, state, kind, owner) if value):
        # No job has a NUL in its team, state or kind, and PostgreSQL refuses to compare one.
        return Job.objects.none()
    jobs = Job.objects.filter(team__in=teams_for_user(user=user)).select_related(
        "team", "owner", "cluster"
    )
    if team:
        jobs = jobs.filter(team__slug=team)
    if state:
        jobs = jobs.filter(state=state)
    if kind:
        jobs = jobs.filter(kind=kind)
    if owner:
        jobs = jobs.filter(owner__username=owner)
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
    "message",
    "created_at",
    "started_at",
    "finished_at",
    "borrowing",
    "evictions",
    "progress",
    "eta_seconds",
    "team__slug",
    "owner__username",
    "cluster__name",
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
    jobs = Job.objects.select_related("team", "owner", "cluster").defer(*defer)
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


@dataclass(frozen=True)
class QuotaUse:
    """One quota of a team, in the quota's own unit (devices, cores, GiB; rounded up)."""

    resource: str
    limit: int  # = nominal, the guaranteed quota
    used: int
    used_display: str
    limit_display: str
    borrowed: int = 0  # used above nominal, on quota the cohort lends
    lent: int = 0  # of the team's nominal, what other teams use now
    borrowing_limit: int | None = None
    lending_limit: int | None = None
    cluster: str = ""  # the cluster's name

    @property
    def nominal(self) -> int:
        return self.limit

    @property
    def percent(self) -> int:
        return min(100, round(100 * self.used / self.limit)) if self.limit else 100


def _units(resource: str, base: int) -> int:
    unit = quota_base(resource, 1)
    return -(-base // unit)  # round up: 500m of cpu is "1 core in use"


def _on(cluster: Cluster | None) -> Q:
    """The jobs on ``cluster`` (the first with ``None``, which holds those with none)."""
    if cluster is None or cluster.is_first:
        return Q(cluster__isnull=True) | Q(cluster__name=settings.CLUSTER_NAME)
    return Q(cluster=cluster)


def _usage_by_team(
    team_ids: Sequence[int], cluster: Cluster | None = None
) -> dict[int, dict[str, int]]:
    totals: dict[int, dict[str, int]] = {pk: defaultdict(int) for pk in team_ids}
    rows = Job.objects.filter(
        _on(cluster),
        team__in=team_ids,
        state__in=ACTIVE_STATES,
        admitted_at__isnull=False,
    ).values_list("team_id", "demand")
    for team_id, demand in rows:
        for resource, amount in demand.items():
            totals[team_id][resource] += int(amount)
    return totals


def quota_usage_for_teams(
    *, teams: Sequence[Team], cluster: Cluster | None = None
) -> dict[int, list[QuotaUse]]:
    """Each team's quotas on ``cluster`` (the first with ``None``) with what its admitted
    jobs there hold, and, in a cohort, what it borrows and lends there now
    (``scheduling.sharing``): three queries, however many teams."""
    cohort_ids = {t.cohort_id for t in teams if t.cohort_id}
    mates = list(Team.objects.filter(cohort_id__in=cohort_ids)) if cohort_ids else []
    everyone = {t.pk: t for t in [*teams, *mates]}
    quotas: dict[int, list[GpuQuota]] = defaultdict(list)
    here = GpuQuota.objects.filter(team__in=list(everyone)).of(cluster)
    for quota in here.order_by("resource"):
        quotas[quota.team_id].append(quota)
    usage = _usage_by_team(list(everyone), cluster)
    lent: dict[int, dict[str, int]] = defaultdict(dict)
    for cohort_id in cohort_ids:
        members = [t for t in everyone.values() if t.cohort_id == cohort_id]
        snapshot = Cohort(
            {
                t.slug: TeamShare(
                    {
                        q.resource: ResourceQuota(
                            nominal=quota_base(q.resource, q.limit),
                            lending_limit=None
                            if q.lending_limit is None
                            else quota_base(q.resource, q.lending_limit),
                        )
                        for q in quotas[t.pk]
                    },
                    usage[t.pk],
                )
                for t in members
            }
        )
        by_slug = snapshot.lent()
        for t in members:
            lent[t.pk] = by_slug[t.slug]
    out: dict[int, list[QuotaUse]] = {}
    for team in teams:
        rows = []
        for quota in quotas[team.pk]:
            used_base = usage[team.pk].get(quota.resource, 0)
            nominal_base = quota_base(quota.resource, quota.limit)
            rows.append(
                QuotaUse(
                    resource=quota.resource,
                    limit=quota.limit,
                    used=_units(quota.resource, used_base),
                    used_display=quota_words(quota.resource, used_base),
                    limit_display=quota_words(quota.resource, nominal_base),
                    borrowed=_units(quota.resource, max(0, used_base - nominal_base)),
                    lent=_units(quota.resource, lent[team.pk].get(quota.resource, 0)),
                    borrowing_limit=quota.borrowing_limit if team.cohort_id else None,
                    lending_limit=quota.lending_limit if team.cohort_id else None,
                    cluster=cluster.name if cluster is not None else settings.CLUSTER_NAME,
                )
            )
        out[team.pk] = rows
    return out


def quota_usage_every_cluster(*, teams: Sequence[Team]) -> dict[int, list[QuotaUse]]:
    """``quota_usage_for_teams`` on every cluster where one of the teams has quota, the
    first cluster's first, then the others' by name (three queries per cluster)."""
    out = quota_usage_for_teams(teams=teams)
    others = (
        Cluster.objects.filter(quotas__team__in=list(teams))
        .exclude(name=settings.CLUSTER_NAME)
        .distinct()
        .order_by("name")
    )
    for cluster in others:
        for team_id, rows in quota_usage_for_teams(teams=teams, cluster=cluster).items():
            out[team_id] = [*out[team_id], *rows]
    return out


def quota_usage(*, team: Team, cluster: Cluster | None = None) -> list[QuotaUse]:
    """Each quota of the team on ``cluster`` (the first with ``None``) with its limit and
    what admitted jobs there hold now."""
    return quota_usage_for_teams(teams=[team], cluster=cluster)[team.pk]


def queued_count(*, team: Team) -> int:
    return Job.objects.filter(team=team, state=JobState.QUEUED).count()


def job_events(*, job: Job) -> QuerySet[JobEvent]:
    """The job's timeline (portal and Kubernetes events), oldest first."""
    return JobEvent.objects.filter(job=job).order_by("created_at", "id")


# Unbound, it formats as every DateTimeField of the API does (ISO 8601, UTC as "Z").
_DATETIME_FIELD = serializers.DateTimeField()


def _datetime(value: datetime | None) -> str | None:
    return None if value is None else _DATETIME_FIELD.to_representation(value)


def job_cluster_name(job: Job) -> str:
    """The cluster it runs on (a row from before several clusters: the first)."""
    return job.cluster.name if job.cluster is not None else settings.CLUSTER_NAME


def job_output(job: Job) -> dict[str, Any]:
    """A job's public fields, as the API returns them (``jobs.apis.JobOutput``); a notice
    about the job carries some of them (``jobs.services.notices``)."""
    return {
        "id": job.pk,
        "team": job.team.slug,
        "name": job.name,
        "kind": str(job.kind),
        "owner": job.owner.username,
        "state": str(job.state),
        "reason": job.reason,
        "message": job.message,
        "priority": job.priority,
        "gpu_count": job.gpu_count,
        "namespace": job.namespace,
        "object_name": job.object_name,
        # As a client may send it again (clone): the stored spec keeps every field.
        "spec": spec_submittable(job.spec),
        "advice": job.advice,
        "placement": job.placement,
        "exit_code": job.exit_code,
        "borrowing": job.borrowing,
        "evictions": job.evictions,
        # The engine that admits it: the portal's own, or Kueue (docs/queueing.md).
        "queueing": str(job.queueing),
        # Where it runs (its spec's ``cluster`` says what was asked: a name, or any).
        "cluster": job_cluster_name(job),
        "idle_warned_at": _datetime(job.idle_warned_at),
        "idle_action_due": _datetime(job.idle_action_due),
        "idle_exempt_reason": job.idle_exempt_reason,
        "scaled_to_zero_from": job.scaled_to_zero_from,
        # Runs after hardware failures (RESTART_ATTEMPT), the nodes it avoids since, and
        # the GPU-hours those failures cost (jobs.services.hardware).
        "restart_attempt": job.gpu_failure_retries,
        "excluded_nodes": list(job.excluded_nodes),
        "gpu_hours_lost": round(job.gpu_hours_lost, 3),
        # Training progress from the job's own log (or its TrainJob's trainerStatus), and
        # the estimated seconds to finish with how they were estimated (None: not yet).
        "progress": job.progress,
        "eta_seconds": job.eta_seconds,
        "eta_basis": job.eta_basis,
        "created_at": _datetime(job.created_at),
        "admitted_at": _datetime(job.admitted_at),
        "started_at": _datetime(job.started_at),
        "finished_at": _datetime(job.finished_at),
    }
