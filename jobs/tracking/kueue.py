"""What Kueue says about a job it holds, read as the portal's state (pure functions; the
sentences are ``jobs.admission.words``').

With ``QUEUEING=kueue`` a job waits in the cluster: its Job is suspended (a Deployment's
pods gated) until Kueue admits its Workload. The Workload's conditions (QUEUEING-NOTES,
"Running on Kueue") give the queued job's reason and message; Kueue's own message is kept
after the portal's sentence, so nothing it said is lost.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from jobs.admission.words import pending_words, preemption_words
from jobs.models import Job, JobState
from jobs.tracking.observe import Observation, true_conditions
from scheduling.k8s_time import parse_time

Obj = dict[str, Any]

# Kueue's pod integration: a pod for a queue waits behind this scheduling gate.
KUEUE_GATE = "kueue.x-k8s.io/admission"


def _condition(workload: Obj, kind: str) -> Obj | None:
    for condition in (workload.get("status") or {}).get("conditions") or []:
        if condition.get("type") == kind:
            return condition
    return None


def newest(workloads: list[Obj]) -> Obj | None:
    """The Workload Kueue follows for the job now (a recreated one replaces the old)."""
    if not workloads:
        return None
    return max(workloads, key=lambda w: str(w["metadata"].get("creationTimestamp") or ""))


def observe_queued(workload: Obj | None) -> Observation:
    """A job Kueue holds back (suspended Job, gated pods) → ``queued`` and why."""
    if workload is None:
        return Observation(
            JobState.QUEUED, "Applied", "Created in the cluster; waiting for Kueue to see it."
        )
    evicted = true_conditions(workload).get("Evicted")
    if evicted is not None:
        return Observation(
            JobState.QUEUED, "Preempted", preemption_words(str(evicted.get("message") or ""))
        )
    if true_conditions(workload).get("Admitted") is not None:
        return Observation(JobState.QUEUED, "Admitted", "Admitted by Kueue; starting.")
    reserved = _condition(workload, "QuotaReserved")
    if reserved is not None and reserved.get("status") == "True":
        return Observation(
            JobState.QUEUED, "QuotaReserved", "Quota reserved; waiting for admission checks."
        )
    queue = str((workload.get("spec") or {}).get("queueName") or "?")
    message = str((reserved or {}).get("message") or "")
    if reserved is not None and reserved.get("reason") == "Inadmissible":
        return Observation(JobState.QUEUED, "Inadmissible", f"Kueue cannot admit it: {message}")
    return Observation(JobState.QUEUED, "QuotaExceeded", pending_words(message, queue))


def pending_message(workload: Obj) -> str:
    """Kueue's own words for why the Workload waits (its QuotaReserved condition)."""
    return str((_condition(workload, "QuotaReserved") or {}).get("message") or "")


def held_by_kueue(kind: str, owner: Obj, pods: list[Obj]) -> bool:
    """Kueue holds the job back: its training Job is suspended (and unfinished), or every
    one of its Deployment's live pods waits behind Kueue's admission gate."""
    if kind == Job.Kind.TRAINING:
        done = true_conditions(owner).keys() & {"Complete", "Failed"}
        return bool((owner.get("spec") or {}).get("suspend")) and not done
    live = [p for p in pods if (p.get("status") or {}).get("phase") in (None, "Pending")]
    return bool(live) and len(live) == len(pods) and all(_gated(p) for p in live)


def _gated(pod: Obj) -> bool:
    return any(
        g.get("name") == KUEUE_GATE for g in (pod.get("spec") or {}).get("schedulingGates") or []
    )


def admitted_at(workload: Obj | None) -> datetime | None:
    """When Kueue admitted the Workload (its ``Admitted`` condition), or None."""
    admitted = true_conditions(workload or {}).get("Admitted")
    return parse_time(admitted.get("lastTransitionTime")) if admitted else None


def workload_owner(workload: Obj) -> tuple[str, str, str] | None:
    """(kind, namespace, name) of the Job or Pod a Workload was made for."""
    owner = next(iter(workload["metadata"].get("ownerReferences") or []), None)
    if owner is None:
        return None
    return str(owner.get("kind")), str(workload["metadata"].get("namespace")), str(owner["name"])


def kueue_names(workload: Obj) -> dict[str, str]:
    """The Kueue objects a job is in, for its page: its Workload, LocalQueue and (once
    admitted) ClusterQueue."""
    names = {
        "workload": str(workload["metadata"]["name"]),
        "local_queue": str((workload.get("spec") or {}).get("queueName") or ""),
    }
    admission = (workload.get("status") or {}).get("admission") or {}
    if admission.get("clusterQueue"):
        names["cluster_queue"] = str(admission["clusterQueue"])
    return names


_PREEMPTOR = re.compile(r"Preempted to accommodate a workload \(UID: (?P<uid>[^,)]+)")


@dataclass
class KueueIndex:
    """What one Workload needs to know of the others to be explained: whose job a
    Workload is, and which jobs each preempting Workload has evicted (Kueue names the
    preemptor only by UID, in the victim's ``Evicted`` message)."""

    job_of_workload: dict[str, int] = field(default_factory=dict)  # Workload UID → job id
    victims_of: dict[str, list[int]] = field(default_factory=dict)  # preemptor UID → job ids
    # The jobs whose quota Kueue counts now (reserved, not evicted, not finished): Kueue's
    # truth, ahead of the rows the tracker is still bringing in line with it.
    holding: set[int] = field(default_factory=set)

    def preemptor_of(self, message: str) -> tuple[str, int | None]:
        """(the preemptor Workload's UID, its portal job id) from an eviction message."""
        found = _PREEMPTOR.search(message)
        uid = found["uid"].strip() if found else ""
        return uid, self.job_of_workload.get(uid)


def kueue_index(by_job: Mapping[int, Iterable[Obj]]) -> KueueIndex:
    """The index of the Workloads of each portal job (``reconcile.kueue_by_job``)."""
    index = KueueIndex()
    for job_id, workloads in by_job.items():
        for workload in workloads:
            index.job_of_workload[str(workload["metadata"].get("uid"))] = job_id
        conditions = true_conditions(newest(list(workloads)) or {})
        evicted = conditions.get("Evicted")
        if "QuotaReserved" in conditions and not conditions.keys() & {"Evicted", "Finished"}:
            index.holding.add(job_id)
        if evicted is not None and evicted.get("reason") == "Preempted":
            uid, _ = index.preemptor_of(str(evicted.get("message") or ""))
            if uid:
                index.victims_of.setdefault(uid, []).append(job_id)
    return index
