"""The words admission speaks, for both engines: why a job is admitted, why it waits, why
it was evicted, and what Kueue said when its quotas are not the portal's.

Pure functions over the cohort's arithmetic (``scheduling.sharing``): the portal's engine
and the Kueue translation (``jobs.selectors.kueue_words``) say the same decision in the
same sentence because both call these.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from datetime import datetime

from django.utils import timezone

from cluster.priority_classes import priority_class_name_of_value
from jobs.models import Job
from scheduling.quantity import quota_words
from scheduling.sharing import Cohort, FitKind, Head, wait_reason

ADMITTED_MESSAGE = "Admitted against the team's quota; waiting to be applied."
BORROWING_MESSAGE = (
    "Admitted on quota borrowed from cohort {cohort}; waiting to be applied. It may be "
    "evicted and re-queued if a lending team needs its GPUs back."
)


def _plural(count: int, word: str) -> str:
    return f"{count} {word}{'' if count == 1 else 's'}"


def wait_words(
    cohort: Cohort, *, cohort_name: str | None, team: str, kind: str, demand: dict[str, int]
) -> str:
    """Why a team's first queued job (of ``kind``, asking ``demand``) waits: ``team vision
    uses 16 of 16 nvidia.com/gpu (nominal) …``."""
    fit = cohort.fit(team, demand)
    if fit.kind is FitKind.BORROWING:
        # It fits only by borrowing, which its kind may not do.
        resource = next(iter(sorted(fit.borrowed)))
        quota = cohort.quota(team, resource)
        assert quota is not None
        used = cohort.usage(team, resource)
        what = "workspaces" if kind == Job.Kind.WORKSPACE else "inference deployments"
        return (
            f"team {team} uses {quota_words(resource, used)} of "
            f"{quota_words(resource, quota.nominal)} {resource} (nominal); {what} of "
            f"{team} run on nominal quota only (a platform admin can let them borrow)"
        )
    words = wait_reason(
        cohort, team=team, demand=demand, cohort_name=cohort_name, amount=quota_words
    )
    return words or "waiting for admission to run"


def waiting_for_evictions_words(count: int) -> str:
    return (
        f"Waiting for {_plural(count, 'evicted job')} to stop; it is admitted as soon as "
        "their GPUs are free."
    )


def evicting_words(victims: Sequence[int]) -> str:
    return (
        f"Evicting {_plural(len(victims), 'job')} ({', '.join(f'#{v}' for v in victims)}) "
        "to run it; it is admitted as soon as their GPUs are free."
    )


def eviction_words(
    cohort: Cohort,
    *,
    victim_team: str,
    preemptor: Head,
    taken: dict[str, int],
    at: datetime,
    position: int,
) -> str:
    """``evicted at 14:02: team robotics reclaimed 8 nvidia.com/gpu it had lent to vision;
    re-queued, position 3``: the resource is the first the preemptor needs (GPUs before
    cpu and memory), ``taken`` what this preemption takes back from the victim's team."""
    when = timezone.localtime(at).strftime("%H:%M")
    contested = [
        r
        for r, a in preemptor.demand.items()
        if a and cohort.quota(preemptor.team, r) is not None and taken.get(r)
    ]
    resource = min(contested, key=lambda r: (r in ("cpu", "memory"), r), default=None)
    if victim_team == preemptor.team and resource is not None:
        what = f"{quota_words(resource, preemptor.demand[resource])} {resource}"
    elif resource is not None:
        what = f"{quota_words(resource, taken[resource])} {resource}"
    else:
        what = "its quota"
    if victim_team == preemptor.team:
        cause = (
            f"job #{preemptor.job_id} of priority "
            f"{priority_class_name_of_value(preemptor.priority)} needed {what} of team "
            f"{victim_team}'s quota"
        )
    else:
        cause = f"team {preemptor.team} reclaimed {what} it had lent to {victim_team}"
    return f"evicted at {when}: {cause}; re-queued, position {position}"


# -- Kueue's own messages, translated (Kueue run by the platform team) ------------------------

_UNUSED = re.compile(
    r"insufficient unused quota for (?P<resource>\S+) in flavor (?P<flavor>[^,]+), "
    r"(?P<more>\S+) more needed"
)
_MAXIMUM = re.compile(
    r"insufficient quota for (?P<resource>\S+) in flavor (?P<flavor>[^,]+),.*"
    r"> maximum capacity \((?P<most>[^)]+)\)"
)
_PREEMPTION = re.compile(
    r"due to (?P<why>[^;]+); preemptor path: (?P<preemptor>\S+); preemptee path: (?P<preemptee>\S+)"
)


def _queue_of(path: str) -> str:
    """``/research/robotics`` (a preemptor path: cohort, then ClusterQueue) → ``robotics``."""
    return path.rstrip("/").rpartition("/")[2]


def preemption_words(message: str) -> str:
    """Kueue's ``Evicted``/``Preempted`` message → who took the GPUs back, and why."""
    found = _PREEMPTION.search(message)
    if found is None:
        return f"Preempted by Kueue. Kueue: {message}"
    preemptor, preemptee = _queue_of(found["preemptor"]), _queue_of(found["preemptee"])
    if "reclamation" in found["why"]:
        cause = f"team {preemptor} reclaimed the quota it had lent to {preemptee}"
    elif "fair sharing" in found["why"]:
        cause = f"team {preemptor} took back its fair share of the cohort"
    else:
        cause = f"a job of higher priority in team {preemptor} needed its quota"
    return f"Preempted: {cause}; back in Kueue's queue. Kueue: {message}"


def pending_words(message: str, queue: str) -> str:
    """Kueue's pending message (QuotaReserved False) → what the job waits for; ``queue``
    is its LocalQueue."""
    found = _UNUSED.search(message)
    if found is not None:
        return (
            f"Waiting for quota: {found['more']} more {found['resource']} than LocalQueue "
            f"{queue} may use now (flavor {found['flavor']}). Kueue: {message}"
        )
    found = _MAXIMUM.search(message)
    if found is not None:
        return (
            f"Asks for more {found['resource']} than LocalQueue {queue} may ever use "
            f"({found['most']} in flavor {found['flavor']}, borrowing included). "
            f"Kueue: {message}"
        )
    return f"Waiting in Kueue's queue. Kueue: {message}" if message else "Waiting in Kueue's queue."
