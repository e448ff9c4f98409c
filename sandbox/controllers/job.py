"""The Job controller (batch/v1), following kube-controller-manager 1.33.

1. Count finished pods once (bookkeeping survives pod deletion, as the real controller's
   ``uncountedTerminatedPods`` tracking does).
2. Suspend/resume; then failure (backoffLimit, activeDeadlineSeconds) and success
   policies, each finishing in two steps: ``FailureTarget``/``SuccessCriteriaMet`` while
   pods terminate, then ``Failed``/``Complete``.
3. Otherwise create or delete pods towards ``parallelism`` (by index for Indexed Jobs),
   with exponential backoff after pod failures and after refused creates (FailedCreate).
"""

from __future__ import annotations

from typing import Any

from sandbox.clock import parse_rfc3339, rfc3339
from sandbox.cluster import Cluster
from sandbox.controllers.common import (
    condition,
    create_pod,
    delete_pod,
    get_condition,
    is_active,
    is_ready,
    owned_by,
    set_condition,
    sync_all,
)
from sandbox.store import Obj

COMPONENT = "job-controller"
INDEX_KEY = "batch.kubernetes.io/job-completion-index"
BACKOFF_BASE = 10.0
BACKOFF_MAX = 360.0


def _indexes_text(indexes: set[int]) -> str:
    """``{0,1,2,4}`` → ``"0-2,4"``."""
    out: list[str] = []
    items = sorted(indexes)
    i = 0
    while i < len(items):
        j = i
        while j + 1 < len(items) and items[j + 1] == items[j] + 1:
            j += 1
        out.append(str(items[i]) if i == j else f"{items[i]}-{items[j]}")
        i = j + 1
    return ",".join(out)


def _pod_index(pod: Obj) -> int | None:
    raw = (pod["metadata"].get("annotations") or {}).get(INDEX_KEY)
    try:
        return int(raw) if raw is not None else None
    except ValueError:
        return None


def _finished(job: Obj) -> bool:
    return any(
        c["type"] in ("Complete", "Failed") and c["status"] == "True"
        for c in job.get("status", {}).get("conditions") or []
    )


def reconcile(cluster: Cluster) -> None:
    sync_all(cluster, "jobs.batch", "pods", _reconcile_job)


def _reconcile_job(cluster: Cluster, job: Obj) -> bool:
    """Sync one Job; True while the clock alone may change it (a deadline, a backoff)."""
    now = cluster.now()
    ts = rfc3339(now)
    meta, spec = job["metadata"], job["spec"]
    status: dict[str, Any] = job.setdefault("status", {})
    uid, ns, name = meta["uid"], meta["namespace"], meta["name"]
    book_key = f"job/{uid}"
    book = cluster.store.meta_get(book_key) or {
        "succeeded": [],
        "failed": [],
        "indexes": [],
        "next_create": 0.0,
        "create_failures": 0,
    }
    pods = owned_by(cluster, "pods", ns, uid)
    indexed = spec.get("completionMode") == "Indexed"
    completions = spec.get("completions")
    parallelism = int(spec.get("parallelism") or 0)
    changed_book = False
    for pod in pods:
        puid = pod["metadata"]["uid"]
        phase = pod["status"].get("phase")
        if phase == "Succeeded" and puid not in book["succeeded"]:
            book["succeeded"].append(puid)
            index = _pod_index(pod)
            if indexed and index is not None and index not in book["indexes"]:
                book["indexes"].append(index)
            changed_book = True
        elif phase == "Failed" and puid not in book["failed"]:
            book["failed"].append(puid)
            book["last_failure"] = now
            changed_book = True
    active = [p for p in pods if is_active(p)]
    terminating = [
        p
        for p in pods
        if p["metadata"].get("deletionTimestamp")
        and p["status"].get("phase") not in ("Succeeded", "Failed")
    ]
    succeeded, failed = len(book["succeeded"]), len(book["failed"])
    restarts = 0
    if spec["template"]["spec"].get("restartPolicy") == "OnFailure":
        restarts = sum(
            cs.get("restartCount", 0)
            for p in active
            for cs in p["status"].get("containerStatuses") or []
        )

    def finish_status() -> None:
        # Same omitempty rules as the Go types: counts appear once non-zero, ``ready`` and
        # ``terminating`` are pointers the controller always sets.
        for key, value in (("active", len(active)), ("succeeded", succeeded), ("failed", failed)):
            if value:
                status[key] = value
            else:
                status.pop(key, None)
        status["ready"] = sum(1 for p in active if is_ready(p))
        status["terminating"] = len(terminating)
        if indexed:
            text = _indexes_text(set(book["indexes"]))
            if text:
                status["completedIndexes"] = text
        status.setdefault("uncountedTerminatedPods", {})

    if _finished(job):
        for pod in active:
            delete_pod(cluster, job, pod, COMPONENT)
        active = []
        finish_status()
        if changed_book:
            cluster.store.meta_set(book_key, book)
        return False

    # Suspend / resume.
    suspended = get_condition(job, "Suspended")
    if spec.get("suspend"):
        for pod in active:
            delete_pod(cluster, job, pod, COMPONENT)
        active = []
        if not suspended or suspended["status"] != "True":
            set_condition(job, condition("Suspended", "True", "JobSuspended", "Job suspended", ts))
            cluster.record_event(job, "Normal", "Suspended", "Job suspended", COMPONENT)
            status.pop("startTime", None)
        finish_status()
        cluster.store.meta_set(book_key, book)
        return False
    if suspended and suspended["status"] == "True":
        set_condition(job, condition("Suspended", "False", "JobResumed", "Job resumed", ts))
        cluster.record_event(job, "Normal", "Resumed", "Job resumed", COMPONENT)
    status.setdefault("startTime", ts)

    # Failure policy, then success policy; each finishes in two steps.
    target = get_condition(job, "FailureTarget") or get_condition(job, "SuccessCriteriaMet")
    if target is None:
        deadline = spec.get("activeDeadlineSeconds")
        backoff_limit = int(spec.get("backoffLimit", 6))
        reason = message = None
        if failed + restarts > backoff_limit:
            reason, message = "BackoffLimitExceeded", "Job has reached the specified backoff limit"
        elif deadline and now - parse_rfc3339(status["startTime"]) >= float(deadline):
            reason, message = "DeadlineExceeded", "Job was active longer than specified deadline"
        if reason and message:
            set_condition(job, condition("FailureTarget", "True", reason, message, ts))
            cluster.record_event(job, "Warning", reason, message, COMPONENT)
            target = get_condition(job, "FailureTarget")
        else:
            if indexed:
                done = completions is not None and len(book["indexes"]) >= int(completions)
            elif completions is None:
                done = succeeded > 0 and not active
            else:
                done = succeeded >= int(completions)
            if done:
                set_condition(
                    job,
                    condition(
                        "SuccessCriteriaMet",
                        "True",
                        "CompletionsReached",
                        "Reached expected number of succeeded pods",
                        ts,
                    ),
                )
                target = get_condition(job, "SuccessCriteriaMet")
    if target is not None:
        for pod in active:
            delete_pod(cluster, job, pod, COMPONENT)
        active = []
        if not terminating:
            final = "Failed" if target["type"] == "FailureTarget" else "Complete"
            set_condition(job, condition(final, "True", target["reason"], target["message"], ts))
            if final == "Complete":
                status["completionTime"] = ts
                cluster.record_event(job, "Normal", "Completed", "Job completed", COMPONENT)
        finish_status()
        cluster.store.meta_set(book_key, book)
        return False

    # Create or delete pods towards the wanted parallelism.
    if indexed:
        total = int(completions or 0)
        busy = {_pod_index(p) for p in active}
        todo = [i for i in range(total) if i not in book["indexes"] and i not in busy]
        want_new = max(0, min(parallelism - len(active), len(todo)))
        excess = max(0, len(active) - parallelism)
    else:
        if completions is None:
            wanted = parallelism if succeeded == 0 else 0
        else:
            wanted = min(parallelism, max(0, int(completions) - succeeded))
        want_new = max(0, wanted - len(active))
        excess = max(0, len(active) - wanted)
        todo = []
    for pod in sorted(active, key=lambda p: p["metadata"]["creationTimestamp"], reverse=True)[
        :excess
    ]:
        delete_pod(cluster, job, pod, COMPONENT)
        active.remove(pod)
    pod_backoff = 0.0
    if failed:
        pod_backoff = book.get("last_failure", 0.0) + min(
            BACKOFF_MAX, BACKOFF_BASE * 2 ** (failed - 1)
        )
    if want_new and now >= max(book["next_create"], pod_backoff):
        error = None
        for n in range(want_new):
            if indexed:
                index = todo[n]
                extra_labels = {INDEX_KEY: str(index)}
                extra_ann = {INDEX_KEY: str(index)}
                tspec = job["spec"]["template"]["spec"]
                containers = []
                for c in tspec.get("containers") or []:
                    c = dict(c)
                    env = [e for e in c.get("env") or [] if e.get("name") != "JOB_COMPLETION_INDEX"]
                    env.append(
                        {
                            "name": "JOB_COMPLETION_INDEX",
                            "valueFrom": {
                                "fieldRef": {
                                    "apiVersion": "v1",
                                    "fieldPath": f"metadata.annotations['{INDEX_KEY}']",
                                }
                            },
                        }
                    )
                    c["env"] = env
                    containers.append(c)
                spec_patch: dict[str, Any] = {
                    "hostname": f"{name}-{index}",
                    "containers": containers,
                }
                if tspec.get("subdomain"):
                    spec_patch["subdomain"] = tspec["subdomain"]
                created, error = create_pod(
                    cluster,
                    job,
                    job["spec"]["template"],
                    f"{name}-{index}-",
                    COMPONENT,
                    extra_labels,
                    extra_ann,
                    spec_patch,
                )
            else:
                created, error = create_pod(
                    cluster, job, job["spec"]["template"], f"{name}-", COMPONENT
                )
            if error:
                cluster.record_event(
                    job, "Warning", "FailedCreate", f"Error creating: {error}", COMPONENT
                )
                book["create_failures"] = int(book.get("create_failures", 0)) + 1
                book["next_create"] = now + min(
                    BACKOFF_MAX, BACKOFF_BASE * 2 ** (book["create_failures"] - 1)
                )
                break
            if created is not None:
                active.append(created)
        if error is None:
            book["create_failures"] = 0
            book["next_create"] = 0.0
        changed_book = True
    if changed_book:
        cluster.store.meta_set(book_key, book)
    finish_status()
    return bool(want_new) or bool(spec.get("activeDeadlineSeconds"))
