"""Admission: turn queued jobs into admitted ones while the team's quota allows.

Race-free by construction: every admission for a team runs in one transaction
holding the team row lock, then the team's quota rows (locked in resource
order, the same order everywhere, so two transactions never deadlock). Usage
is recomputed from committed rows under those locks, so concurrent submissions
and concurrent workers can never admit more than the quota.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

from django.db import transaction
from django.utils import timezone

from jobs.models import ACTIVE_STATES, Job, JobEvent, JobState
from jobs.quota import format_amount, quota_capacity
from teams.models import GpuQuota, Team


@dataclass
class AdmissionResult:
    admitted: list[int] = field(default_factory=list)
    waiting: dict[int, str] = field(default_factory=dict)  # job id → reason


def blocking_resource(
    demand: dict[str, int], used: dict[str, int], limits: dict[str, int]
) -> str | None:
    for resource, amount in demand.items():
        if resource in limits and used.get(resource, 0) + amount > quota_capacity(
            resource, limits[resource]
        ):
            return resource
    return None


def admission_run(*, team_id: int) -> AdmissionResult:
    """Admit the team's queued jobs in priority order, then FIFO, while quota allows.

    1. Lock the team row, then its quota rows in resource order.
    2. Sum what admitted, unfinished jobs hold.
    3. Walk queued, not-yet-admitted jobs by (priority desc, created_at, id):
       admit each that fits; the first that does not fit stops the walk
       (strict order, so a large job is never starved by smaller ones behind it)
       and every job from there on records why it waits.
    """
    result = AdmissionResult()
    with transaction.atomic():
        team = Team.objects.select_for_update().filter(pk=team_id).first()
        if team is None:
            return result
        limits = {
            q.resource: q.limit
            for q in GpuQuota.objects.select_for_update().filter(team=team).order_by("resource")
        }
        used: dict[str, int] = defaultdict(int)
        for demand in Job.objects.filter(
            team=team, state__in=ACTIVE_STATES, admitted_at__isnull=False
        ).values_list("demand", flat=True):
            for resource, amount in demand.items():
                used[resource] += int(amount)
        queue = list(
            Job.objects.select_for_update()
            .filter(team=team, state=JobState.QUEUED, admitted_at__isnull=True)
            .order_by("-priority_value", "created_at", "id")
        )
        blocked_by: str | None = None
        now = timezone.now()
        for position, job in enumerate(queue):
            if blocked_by is None:
                blocked_by = blocking_resource(job.demand, used, limits)
                if blocked_by is None:
                    for resource, amount in job.demand.items():
                        used[resource] += int(amount)
                    job.admitted_at = now
                    job.reason = "Admitted"
                    job.message = "Admitted against the team's quota; waiting to be applied."
                    job.save(update_fields=["admitted_at", "reason", "message", "updated_at"])
                    JobEvent.objects.create(job=job, reason="Admitted", message=job.message)
                    result.admitted.append(job.pk)
                    continue
            assert blocked_by is not None
            ahead = position - len(result.admitted)
            message = (
                f"team {team.slug} uses {format_amount(blocked_by, used.get(blocked_by, 0))} of "
                f"{format_amount(blocked_by, quota_capacity(blocked_by, limits[blocked_by]))} "
                f"{blocked_by}; {ahead} job{'s' if ahead != 1 else ''} ahead"
            )
            if job.reason != "QuotaExceeded" or job.message != message:
                job.reason, job.message = "QuotaExceeded", message
                job.save(update_fields=["reason", "message", "updated_at"])
            result.waiting[job.pk] = message
    return result
