"""What Kueue decided, in the words the portal's own engine uses for the same decision
(``QUEUEING=kueue``, the portal managing Kueue's configuration).

Kueue's messages name flavors and Workload UIDs; a user should read what the portal's
engine would have told them ("team vision uses 16 of 16 nvidia.com/gpu (nominal) …",
"evicted at 14:02: team robotics reclaimed 8 nvidia.com/gpu it had lent to vision …").
The sentences are made by admission's own functions (``jobs.admission.words``) from the quota rows
Kueue's ClusterQueues are written from and the jobs Kueue admitted, so the two engines
cannot drift apart; Kueue's own message follows in brackets, so nothing it said is lost.
With Kueue run by the platform team the quotas are not the portal's: the tracker then
keeps Kueue's message, translated (``jobs.tracking.kueue``).
"""

from __future__ import annotations

from collections import defaultdict
from datetime import datetime
from typing import Any

from cluster.models import Cluster
from jobs.admission.decisions import AdmissionPass, QueuedJob, admission_read, on
from jobs.admission.words import evicting_words, eviction_words
from jobs.models import Job, queue_key
from jobs.tracking.kueue import KueueIndex
from scheduling.k8s_time import parse_time

# Kueue's reasons for a preemption across teams of a cohort (Preempted condition).
_RECLAIM = ("InCohortReclamation", "InCohortFairSharing", "InCohortReclaimWhileBorrowing")
_PLACE = ("priority_value", "created_at", "pk")
_ROW = ("pk", "team_id", "kind", "priority_value", "created_at", "demand")


class KueueWords:
    """One per tracking pass: each cohort's snapshot and each team's queue are read once,
    however many of their jobs are explained."""

    def __init__(self, index: KueueIndex, cluster: Cluster | None = None) -> None:
        self.index = index
        self.cluster = cluster  # whose Workloads these are (a team's quota is per cluster)
        self._passes: dict[int, AdmissionPass | None] = {}
        self._queues: dict[int, list[tuple[int, datetime, int]]] = {}

    def _pass(self, team_id: int) -> AdmissionPass | None:
        if team_id not in self._passes:
            state = admission_read(
                team_id, lock=False, queueing=Job.Queueing.KUEUE, cluster=self.cluster
            )
            if state is not None:
                self._as_kueue_holds(state)
            for tid in state.teams if state is not None else [team_id]:
                self._passes[tid] = state
        return self._passes[team_id]

    def _as_kueue_holds(self, state: AdmissionPass) -> None:
        """Count in the cohort what Kueue counts now: a job it has just evicted no longer,
        one it has just admitted already, whatever the rows say yet."""
        slugs = {tid: team.slug for tid, team in state.teams.items()}
        rows = {h["pk"]: h for h in state.holders}
        for pk, holder in rows.items():
            if pk not in self.index.holding:
                state.cohort.remove(slugs[holder["team_id"]], holder["demand"])
        admitted = Job.objects.filter(
            pk__in=self.index.holding - rows.keys(), team__in=list(state.teams)
        ).values_list("team_id", "demand")
        for team_id, demand in admitted:
            state.cohort.add(slugs[team_id], demand)

    def _ahead(self, job: Job, *, preemptor: int | None = None) -> int:
        """How many of the team's jobs waiting in Kueue go before ``job`` (the portal
        engine's order: priority, then submission); its ``preemptor`` among them, as when
        Kueue evicted it, whether or not Kueue has admitted it since."""
        if job.team_id not in self._queues:
            waiting = on(
                Job.objects.filter(team_id=job.team_id), self.cluster
            ).waiting_for_admission(Job.Queueing.KUEUE)
            self._queues[job.team_id] = [queue_key(*row) for row in waiting.values_list(*_PLACE)]
        queue = self._queues[job.team_id]
        if preemptor is not None and all(other[2] != preemptor for other in queue):
            row = Job.objects.filter(pk=preemptor, team_id=job.team_id)
            queue = queue + [queue_key(*place) for place in row.values_list(*_PLACE)]
        key = queue_key(job.priority_value, job.created_at, job.pk)
        return sum(1 for other in queue if other < key and other[2] != job.pk)

    def waiting(self, job: Job, workload: Any, kueue_message: str) -> str | None:
        """Why a job Kueue has not admitted waits; None when the portal's rules do not
        explain it (Kueue's message, translated, is then the best there is)."""
        uid = str(workload["metadata"].get("uid"))
        victims = sorted(self.index.victims_of.get(uid, []))
        if victims:
            words = evicting_words(victims)
        else:
            state = self._pass(job.team_id)
            queue = state.queues[job.team_id] if state is not None else []
            # The team's first job Kueue has not admitted (a row may not know it yet).
            head = next((q for q in queue if q.job_id not in self.index.holding), None)
            if state is None or head is None:
                return None
            words = state.wait_words(job.team_id, head)
            ahead = self._ahead(job)
            words += f"; {ahead} job{' ahead' if ahead == 1 else 's ahead'}"
        return f"{words} (Kueue: {kueue_message})" if kueue_message else words

    def evicted(self, job: Job, condition: dict[str, Any], reason: str) -> str | None:
        """Why Kueue evicted the job; ``reason`` is its ``Preempted`` condition's (who
        preempted: a job of its own team, or another team taking its quota back)."""
        message = str(condition.get("message") or "")
        if job.reason == "Preempted" and job.message.startswith("evicted at "):
            return job.message  # said once, at the eviction, as the portal's engine does
        preemptor_uid, preemptor_id = self.index.preemptor_of(message)
        state = self._pass(job.team_id)
        rows = {
            row["pk"]: row
            for row in Job.objects.filter(
                pk__in=[preemptor_id or 0, *self.index.victims_of.get(preemptor_uid, [job.pk])]
            ).values(*_ROW)
        }
        preemptor = rows.get(preemptor_id or 0)
        if state is None or preemptor is None or preemptor["team_id"] not in state.teams:
            return None
        if reason not in (*_RECLAIM, "InClusterQueue"):
            return None
        taken: dict[str, int] = defaultdict(int)
        for row in rows.values():
            if row["pk"] != preemptor_id and row["team_id"] == job.team_id:
                for resource, amount in row["demand"].items():
                    taken[resource] += int(amount)
        words = eviction_words(
            state.cohort,
            victim_team=state.teams[job.team_id].slug,
            preemptor=state.as_head(QueuedJob(*(preemptor[name] for name in _ROW))),
            taken=taken,
            at=parse_time(condition.get("lastTransitionTime")) or job.updated_at,
            position=self._ahead(job, preemptor=preemptor["pk"]) + 1,
        )
        return f"{words} (Kueue: {message})"
