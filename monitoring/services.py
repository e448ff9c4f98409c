"""Writes of the monitoring layer: acting on what the metrics show (the idle-GPU policy)."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.utils import timezone

from cluster import kube
from jobs.models import Job, JobState
from jobs.services.idle import job_idle_clear, job_idle_scale_down, job_idle_stop, job_idle_warn
from jobs.services.timeline import timeline_add
from monitoring.idleness import (
    HeldGpu,
    IdleRule,
    WorkspaceIdleness,
    jobs_idleness,
    workspaces_idleness,
)
from teams.models import Team
from workspaces.selectors import workspace_activity
from workspaces.services import workspace_idle_warn, workspace_stop_begin

logger = logging.getLogger(__name__)


@dataclass
class PolicyRun:
    reported: list[int] = field(default_factory=list)  # report only: told once per run
    warned: list[int] = field(default_factory=list)  # act: the countdown started
    cleared: list[int] = field(default_factory=list)  # busy again: the countdown stopped
    stopped: list[int] = field(default_factory=list)  # still idle at the deadline


def _gpus_text(gpus: list[HeldGpu]) -> str:
    shown = ", ".join(f"{g.node} GPU {g.index} ({g.peak:.1f}%)" for g in gpus[:8])
    return shown + (f" and {len(gpus) - 8} more" if len(gpus) > 8 else "")


def idle_policy_run(*, now: datetime | None = None) -> PolicyRun:
    """One pass of every team's idle-GPU policy.

    1. The running GPU jobs, not exempt, of the teams whose policy is not off, each
       against its team's rule (``monitoring.idleness.jobs_idleness``): idle, busy, or
       unknown (no samples, or too young): an unknown job is never warned nor acted on.
    2. Report only: an idle job gets one ``IdleGPUs`` timeline entry per run (it notifies
       the owner). Warn, then act: an idle job is warned with the time it will be stopped;
       still idle at that time, a training job is cancelled; busy in between, the
       countdown stops.
    Raises ``MetricsUnavailable`` before doing anything when Prometheus cannot answer.
    """
    now = now or timezone.now()
    result = PolicyRun()
    jobs = (
        Job.objects.filter(state=JobState.RUNNING, gpu_count__gt=0, idle_exempt_reason="")
        .exclude(team__idle_policy=Team.IdlePolicy.OFF)
        .exclude(kind=Job.Kind.WORKSPACE)  # their own rule: workspace_idle_run
        .select_related("team")
    )
    for found in jobs_idleness(jobs=jobs, now=now):
        job = found.job
        if found.idle:
            _idle(job, found.gpus, found.rule, now, result)
        elif found.busy and job.idle_warned_at is not None:
            busiest = max(found.gpus, key=lambda g: g.peak)
            message = (
                f"Its GPUs are busy again ({busiest.node} GPU {busiest.index} reached "
                f"{busiest.peak:.1f}%): the countdown is stopped."
            )
            if job_idle_clear(job_id=job.pk, message=message):
                result.cleared.append(job.pk)
    return result


def _idle(job: Job, gpus: list[HeldGpu], rule: IdleRule, now: datetime, result: PolicyRun) -> None:
    team = job.team
    peak = max((g.peak for g in gpus), default=0.0)
    finding = (
        f"All {job.gpu_count} GPU(s) stayed under {rule.threshold_percent:g}% utilisation for "
        f"the last {rule.window_minutes:g} min (peak {peak:.1f}%): "
        f"{_gpus_text(gpus) or 'no device samples'}."
    )
    if team.idle_policy == Team.IdlePolicy.REPORT:
        run = job.started_at.isoformat() if job.started_at else "unknown"
        entry = timeline_add(
            job_id=job.pk,
            reason="IdleGPUs",
            message=f"{finding} Free them if the work is done or stuck.",
            type="Warning",
            dedupe_key=f"idle:{run}",
        )
        if entry is not None:
            result.reported.append(job.pk)
        return
    training = job.kind == Job.Kind.TRAINING
    if job.idle_warned_at is None:
        due = now + timedelta(minutes=team.idle_grace_minutes)
        action = "cancel it" if training else "scale it to zero replicas"
        message = (
            f"{finding} Team {team.slug}'s idle-GPU policy will {action} at "
            f"{due:%H:%M} UTC unless its GPUs become active; a lead can exempt it."
        )
        if job_idle_warn(job_id=job.pk, now=now, due=due, message=message):
            result.warned.append(job.pk)
        return
    if job.idle_action_due is None or job.idle_action_due > now:
        return
    warned = f"warned at {job.idle_warned_at:%H:%M} UTC and still idle at {now:%H:%M}"
    if training:
        message = (
            f"Cancelled by team {team.slug}'s idle-GPU policy: {warned}. {finding} "
            "Clone it to run it again (from its last checkpoint)."
        )
        stopped = job_idle_stop(job_id=job.pk, message=message, now=now)
    else:
        message = (
            f"Scaled to zero by team {team.slug}'s idle-GPU policy: {warned}. {finding} "
            "Resume it from its page (or POST /api/v1/jobs/<id>/resume/)."
        )
        try:
            stopped = job_idle_scale_down(job_id=job.pk, message=message, now=now)
        except kube.ClusterError as exc:
            logger.warning(
                "idle policy: job %s not scaled down (next run retries): %s", job.pk, exc
            )
            stopped = False
    if stopped:
        result.stopped.append(job.pk)


def workspace_idle_run(*, now: datetime | None = None) -> PolicyRun:
    """One pass of every team's workspace rule (docs/workspaces.md, "Stopped when idle").

    1. Each running workspace, not exempt, against its team's rule and maximum lifetime
       (``monitoring.idleness.workspaces_idleness``: both signals by default).
    2. Unknown (a signal could not be read): nothing happens, not even a cleared warning;
       only the maximum lifetime, which needs no signal, still counts.
    3. Idle or over its lifetime: the owner is warned (timeline ``WorkspaceIdle``, a
       notification, the banner on its page) with the time it will be stopped; still so at
       that time, it is stopped (its pod goes, its home folder stays; ``IdleStopped`` or
       ``LifetimeStopped``). Active again in between: the countdown stops.
    """
    now = now or timezone.now()
    result = PolicyRun()
    jobs = Job.objects.filter(
        kind=Job.Kind.WORKSPACE, state=JobState.RUNNING, idle_exempt_reason=""
    ).select_related("team", "owner")
    for found in workspaces_idleness(
        jobs=jobs, now=now, activity_of=lambda job: workspace_activity(job=job)
    ):
        job = found.job
        if found.unknown and not found.over_lifetime:
            logger.info("workspace %s: nothing decided (%s)", job.pk, found.unknown)
            continue
        if not (found.idle or found.over_lifetime):
            if job.idle_warned_at is not None and job_idle_clear(
                job_id=job.pk, message=f"Active again ({found.finding}): the countdown is stopped."
            ):
                result.cleared.append(job.pk)
            continue
        _workspace_due(job, found, now, result)
    return result


def _workspace_due(job: Job, found: WorkspaceIdleness, now: datetime, result: PolicyRun) -> None:
    team = job.team
    why = (
        f"it has run the team's maximum of {team.workspace_max_hours:g} h"
        if found.over_lifetime
        else "it is idle"
    )
    if job.idle_warned_at is None:
        due = now + timedelta(minutes=team.workspace_grace_minutes)
        message = (
            f"Team {team.slug} stops this workspace at {due:%H:%M} UTC: {why} ({found.finding}). "
            "Its home folder is kept; use it to keep it running."
        )
        if workspace_idle_warn(job_id=job.pk, now=now, due=due, message=message):
            result.warned.append(job.pk)
        return
    if job.idle_action_due is None or job.idle_action_due > now:
        return
    reason = "LifetimeStopped" if found.over_lifetime else "IdleStopped"
    rule = (
        f"at team {team.slug}'s maximum lifetime of {team.workspace_max_hours:g} h"
        if found.over_lifetime
        else f"for being idle, by team {team.slug}'s idle rule"
    )
    message = f"Stopped {rule} ({found.finding}); warned at {job.idle_warned_at:%H:%M} UTC."
    if workspace_stop_begin(
        job=job, reason=reason, message=message, actor=None, event_type="Warning"
    ):
        result.stopped.append(job.pk)
