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
from sandbox.state import Cluster
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
    return _JobSync(cluster, job).run()


class _JobSync:
    """One sync of one Job, a method per step; the step's state lives on the instance."""

    def __init__(self, cluster: Cluster, job: Obj) -> None:
        self.cluster, self.job = cluster, job
        self.now = cluster.now()
        self.ts = cluster.stamp(self.now)
        meta, self.spec = job["metadata"], job["spec"]
        self.status: dict[str, Any] = job.setdefault("status", {})
        self.uid, self.ns, self.name = meta["uid"], meta["namespace"], meta["name"]
        self.book_key = f"job/{self.uid}"
        self.book: dict[str, Any] = cluster.store.meta_get(self.book_key) or {
            "succeeded": [],
            "failed": [],
            "indexes": [],
            "next_create": 0.0,
            "create_failures": 0,
        }
        self.indexed = self.spec.get("completionMode") == "Indexed"
        self.completions = self.spec.get("completions")
        self.parallelism = int(self.spec.get("parallelism") or 0)
        self.pods = owned_by(cluster, "pods", self.ns, self.uid)
        self.book_changed = False
        self.active: list[Obj] = []
        self.terminating: list[Obj] = []

    def run(self) -> bool:
        self._count_finished_pods()
        if _finished(self.job):
            self._delete_active()
            self._write_status()
            if self.book_changed:
                self._save_book()
            return False
        if self._suspended():
            self._write_status()
            self._save_book()
            return False
        target = self._failure_or_success_target()
        if target is not None:
            self._finish(target)
            self._write_status()
            self._save_book()
            return False
        want_new = self._scale()
        if self.book_changed:
            self._save_book()
        self._write_status()
        return bool(want_new) or bool(self.spec.get("activeDeadlineSeconds"))

    # 1. Bookkeeping -------------------------------------------------------------------

    def _count_finished_pods(self) -> None:
        """Record each pod that finished, once (the count survives the pod's deletion)."""
        book = self.book
        for pod in self.pods:
            puid = pod["metadata"]["uid"]
            phase = pod["status"].get("phase")
            if phase == "Succeeded" and puid not in book["succeeded"]:
                book["succeeded"].append(puid)
                index = _pod_index(pod)
                if self.indexed and index is not None and index not in book["indexes"]:
                    book["indexes"].append(index)
                self.book_changed = True
            elif self._failed(pod) and puid not in book["failed"]:
                book["failed"].append(puid)
                book["last_failure"] = self.now
                self.book_changed = True
        self.active = [p for p in self.pods if is_active(p)]
        self.terminating = [
            p
            for p in self.pods
            if p["metadata"].get("deletionTimestamp")
            and p["status"].get("phase") not in ("Succeeded", "Failed")
        ]

    def _failed(self, pod: Obj) -> bool:
        """As ``isPodFailed``: a Failed pod; also a deleted one that has not succeeded (it
        may never reach a phase: its node is gone), unless the Job only replaces Failed pods
        (``podReplacementPolicy: Failed``, or a ``podFailurePolicy``). Pods the controller
        deletes itself on suspend are not failures."""
        phase = pod["status"].get("phase")
        if phase == "Failed":
            return True
        if self.spec.get("podFailurePolicy") or self.spec.get("podReplacementPolicy") == "Failed":
            return False
        return bool(
            pod["metadata"].get("deletionTimestamp")
            and phase != "Succeeded"
            and not self.spec.get("suspend")
        )

    @property
    def succeeded(self) -> int:
        return len(self.book["succeeded"])

    @property
    def failed(self) -> int:
        return len(self.book["failed"])

    def _restarts(self) -> int:
        if self.spec["template"]["spec"].get("restartPolicy") != "OnFailure":
            return 0
        return sum(
            cs.get("restartCount", 0)
            for p in self.active
            for cs in p["status"].get("containerStatuses") or []
        )

    def _save_book(self) -> None:
        self.cluster.store.meta_set(self.book_key, self.book)

    def _write_status(self) -> None:
        # Same omitempty rules as the Go types: counts appear once non-zero, ``ready`` and
        # ``terminating`` are pointers the controller always sets.
        status = self.status
        counts = (("active", len(self.active)), ("succeeded", self.succeeded))
        for key, value in (*counts, ("failed", self.failed)):
            if value:
                status[key] = value
            else:
                status.pop(key, None)
        status["ready"] = sum(1 for p in self.active if is_ready(p))
        status["terminating"] = len(self.terminating)
        if self.indexed:
            text = _indexes_text(set(self.book["indexes"]))
            if text:
                status["completedIndexes"] = text
        status.setdefault("uncountedTerminatedPods", {})

    def _delete_active(self) -> None:
        for pod in self.active:
            delete_pod(self.cluster, self.job, pod, COMPONENT)
        self.active = []

    # 2. Suspend / resume, failure and success policies -----------------------------------

    def _suspended(self) -> bool:
        """Suspend (deleting the active pods) or resume; True while the Job is suspended."""
        job, ts = self.job, self.ts
        suspended = get_condition(job, "Suspended")
        if self.spec.get("suspend"):
            self._delete_active()
            if not suspended or suspended["status"] != "True":
                set_condition(
                    job, condition("Suspended", "True", "JobSuspended", "Job suspended", ts)
                )
                self.cluster.record_event(job, "Normal", "Suspended", "Job suspended", COMPONENT)
                self.status.pop("startTime", None)
            return True
        if suspended and suspended["status"] == "True":
            set_condition(job, condition("Suspended", "False", "JobResumed", "Job resumed", ts))
            self.cluster.record_event(job, "Normal", "Resumed", "Job resumed", COMPONENT)
        self.status.setdefault("startTime", ts)
        return False

    def _failure_or_success_target(self) -> Obj | None:
        """The ``FailureTarget`` or ``SuccessCriteriaMet`` condition, set now if due."""
        job, ts = self.job, self.ts
        target = get_condition(job, "FailureTarget") or get_condition(job, "SuccessCriteriaMet")
        if target is not None:
            return target
        failure = self._failure_reason()
        if failure is not None:
            reason, message = failure
            set_condition(job, condition("FailureTarget", "True", reason, message, ts))
            self.cluster.record_event(job, "Warning", reason, message, COMPONENT)
            return get_condition(job, "FailureTarget")
        if self._succeeded():
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
            return get_condition(job, "SuccessCriteriaMet")
        return None

    def _failure_reason(self) -> tuple[str, str] | None:
        deadline = self.spec.get("activeDeadlineSeconds")
        if self.failed + self._restarts() > int(self.spec.get("backoffLimit", 6)):
            return "BackoffLimitExceeded", "Job has reached the specified backoff limit"
        if deadline and self.now - self.cluster.sim_time(self.status["startTime"]) >= float(
            deadline
        ):
            return "DeadlineExceeded", "Job was active longer than specified deadline"
        return None

    def _succeeded(self) -> bool:
        if self.indexed:
            return self.completions is not None and len(self.book["indexes"]) >= int(
                self.completions
            )
        if self.completions is None:
            return self.succeeded > 0 and not self.active
        return self.succeeded >= int(self.completions)

    def _finish(self, target: Obj) -> None:
        """Second step of finishing: once no pod is terminating, ``Failed``/``Complete``."""
        self._delete_active()
        if self.terminating:
            return
        final = "Failed" if target["type"] == "FailureTarget" else "Complete"
        set_condition(
            self.job, condition(final, "True", target["reason"], target["message"], self.ts)
        )
        if final == "Complete":
            self.status["completionTime"] = self.ts
            self.cluster.record_event(self.job, "Normal", "Completed", "Job completed", COMPONENT)

    # 3. Pods towards the wanted parallelism ----------------------------------------------

    def _scale(self) -> int:
        """Delete excess pods and create missing ones; returns how many were wanted."""
        if self.indexed:
            busy = {_pod_index(p) for p in self.active}
            todo = [
                i
                for i in range(int(self.completions or 0))
                if i not in self.book["indexes"] and i not in busy
            ]
            want_new = max(0, min(self.parallelism - len(self.active), len(todo)))
            excess = max(0, len(self.active) - self.parallelism)
        else:
            if self.completions is None:
                wanted = self.parallelism if self.succeeded == 0 else 0
            else:
                wanted = min(self.parallelism, max(0, int(self.completions) - self.succeeded))
            want_new = max(0, wanted - len(self.active))
            excess = max(0, len(self.active) - wanted)
            todo = []
        newest_first = sorted(
            self.active, key=lambda p: p["metadata"]["creationTimestamp"], reverse=True
        )
        for pod in newest_first[:excess]:
            delete_pod(self.cluster, self.job, pod, COMPONENT)
            self.active.remove(pod)
        if want_new and self.now >= max(self.book["next_create"], self._pod_backoff()):
            self._create_pods(want_new, todo)
        return want_new

    def _pod_backoff(self) -> float:
        """When a new pod may be created after the last pod failure (exponential)."""
        if not self.failed:
            return 0.0
        return self.book.get("last_failure", 0.0) + min(
            BACKOFF_MAX, BACKOFF_BASE * 2 ** (self.failed - 1)
        )

    def _create_pods(self, count: int, todo: list[int]) -> None:
        """Create ``count`` pods (the first ``todo`` indexes of an Indexed Job); a refused
        create is a FailedCreate event and backs off further creates."""
        book, error = self.book, None
        for n in range(count):
            if self.indexed:
                created, error = self._create_indexed_pod(todo[n])
            else:
                created, error = create_pod(
                    self.cluster, self.job, self.spec["template"], f"{self.name}-", COMPONENT
                )
            if error:
                self.cluster.record_event(
                    self.job, "Warning", "FailedCreate", f"Error creating: {error}", COMPONENT
                )
                book["create_failures"] = int(book.get("create_failures", 0)) + 1
                book["next_create"] = self.now + min(
                    BACKOFF_MAX, BACKOFF_BASE * 2 ** (book["create_failures"] - 1)
                )
                break
            if created is not None:
                self.active.append(created)
        if error is None:
            book["create_failures"] = 0
            book["next_create"] = 0.0
        self.book_changed = True

    def _create_indexed_pod(self, index: int) -> tuple[Obj | None, str | None]:
        """A pod of an Indexed Job: its index in a label and an annotation, a stable
        hostname, and ``JOB_COMPLETION_INDEX`` from the annotation in every container."""
        tspec = self.spec["template"]["spec"]
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
        spec_patch: dict[str, Any] = {"hostname": f"{self.name}-{index}", "containers": containers}
        if tspec.get("subdomain"):
            spec_patch["subdomain"] = tspec["subdomain"]
        return create_pod(
            self.cluster,
            self.job,
            self.spec["template"],
            f"{self.name}-{index}-",
            COMPONENT,
            {INDEX_KEY: str(index)},
            {INDEX_KEY: str(index)},
            spec_patch,
        )
