"""Jobs that failed because their GPU failed: DCGM's XID errors, joined to the pods that held
the GPUs, explained on the job (``jobs.services.hardware.job_hardware_failure_record``).

A failed training job's exit code cannot tell a program's bug from a GPU that fell off the
bus (both exit 1). DCGM can: the GPU's ``DCGM_FI_DEV_XID_ERRORS`` rises to the XID code.
Every ``GPU_FAILURE_CHECK_INTERVAL_SECONDS`` each job that failed within
``GPU_FAILURE_WINDOW_MINUTES`` is looked at around the moment it failed: the devices its
pods held then, and whether any of them reported a higher XID just after than just before
(``XID_BEFORE_SECONDS`` before the failure against ``XID_AFTER_SECONDS`` after it: the
driver's XID comes first, the exporter shows it at its next scrape). Around the failure, not
anywhere in the window: a GPU freed by a failed job and failing later under the next job
is that job's failure, not the first one's. No metrics: nothing is decided.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.conf import settings
from django.contrib.auth.models import User
from django.utils import timezone

from cluster import kube
from jobs.models import Job, JobState
from jobs.services.hardware import GPU_FAILURE, HARDWARE_FAILURES, job_hardware_failure_record
from jobs.tasks import job_evict_task
from monitoring import prometheus, queries
from monitoring.models import NodeFailure
from monitoring.selectors.common import PodKey, pods_to_jobs
from monitoring.xid import xid_text
from notifications.services import Notice, notice_publish
from teams.audit import audit_record

logger = logging.getLogger(__name__)

# The XID precedes the program's failure (a CUDA call fails at once; a collective may wait
# for its timeout), and reaches Prometheus only at the exporter's next scrape after it.
XID_BEFORE_SECONDS = 120.0
XID_AFTER_SECONDS = 90.0


@dataclass(frozen=True)
class _Device:
    node: str
    gpu: str


def _device(labels: dict[str, str]) -> _Device:
    node = labels.get("node") or labels.get("Hostname") or labels.get("hostname") or "?"
    return _Device(node, labels.get("gpu", "?"))


def _xids(at: datetime, window: float) -> dict[_Device, int]:
    return {
        _device(s.labels): int(s.value or 0)
        for s in prometheus.query(queries.gpu_xid_highest(window), at=at)
    }


@dataclass(frozen=True)
class Struck:
    """A device that reported a new XID under one of the job's pods as it failed."""

    pod: str
    node: str
    gpu: str
    xid: int


def gpu_failures_find(*, job: Job, now: datetime) -> list[Struck]:
    """The devices the failed ``job``'s pods held when it failed whose XID rose then (see
    the module's docstring); by pod, node and GPU."""
    failed_at = job.finished_at or now
    after = min(now, failed_at + timedelta(seconds=XID_AFTER_SECONDS))
    # This run's pods only: a run that started after a hardware failure must not be blamed
    # for the GPU its previous run failed on.
    since = failed_at - timedelta(seconds=XID_BEFORE_SECONDS)
    if job.started_at is not None and job.started_at > since:
        since = job.started_at
    around = max(1.0, (after - since).total_seconds())
    held: dict[PodKey, set[_Device]] = defaultdict(set)
    for s in prometheus.query(queries.held_devices_over(around), at=after):
        held[(s.labels.get("namespace", ""), s.labels.get("pod", ""))].add(_device(s.labels))
    mine = list(pods_to_jobs(held, [job]))
    if not mine:
        return []
    rose = _xids(after, around)
    before = _xids(failed_at - timedelta(seconds=XID_BEFORE_SECONDS), XID_BEFORE_SECONDS)
    return [
        Struck(pod[1], device.node, device.gpu, rose[device])
        for pod in sorted(mine)
        for device in sorted(held[pod], key=lambda d: (d.node, d.gpu))
        if rose.get(device, 0) > before.get(device, 0)
    ]


def gpu_failures_check(*, now: datetime | None = None) -> list[int]:
    """Explain the recently failed jobs whose GPUs reported a new XID as they failed; returns
    their ids. Raises ``MetricsUnavailable`` (the next run looks again)."""
    now = now or timezone.now()
    window = timedelta(minutes=float(settings.GPU_FAILURE_WINDOW_MINUTES))
    failed = list(
        Job.objects.filter(
            state=JobState.FAILED, gpu_count__gt=0, finished_at__gte=now - window
        ).exclude(reason__in=HARDWARE_FAILURES)
    )
    explained: list[int] = []
    for job in failed:
        hits = gpu_failures_find(job=job, now=now)
        if not hits:
            continue
        when = timezone.localtime(job.finished_at or now)
        parts = [
            f"pod {hit.pod} failed: GPU {hit.gpu} on node {hit.node} reported "
            f"{xid_text(hit.xid)} at {when:%H:%M}"
            for hit in hits
        ]
        message = "; ".join(parts) + ". The hardware failed, not the program."
        nodes = sorted({hit.node for hit in hits})
        pods = sorted({hit.pod for hit in hits})
        recorded = job_hardware_failure_record(
            job_id=job.pk, reason=GPU_FAILURE, message=message, nodes=nodes, pods=pods
        )
        if recorded.requeued:
            job_evict_task.delay(job.pk)
        if recorded.changed:
            explained.append(job.pk)
            logger.warning("job %s: %s", job.pk, message)
            NodeFailure.objects.bulk_create(
                NodeFailure(
                    node=hit.node,
                    gpu=hit.gpu,
                    xid=hit.xid,
                    job=job,
                    pod=hit.pod,
                    at=job.finished_at or now,
                )
                for hit in hits
            )
            for node in nodes:
                _failing_node(node, now)
    return explained


def _failing_node(node: str, now: datetime) -> None:
    """The node's failures within ``GPU_FAILURE_CORDON_WINDOW_HOURS``, read once: reported
    to the platform admins and the node cordoned, each past its own threshold."""
    report, cordon = int(settings.GPU_FAILURE_REPORT_AFTER), int(settings.GPU_FAILURE_CORDON_AFTER)
    if report <= 0 and cordon <= 0:
        return
    since = now - timedelta(hours=float(settings.GPU_FAILURE_CORDON_WINDOW_HOURS))
    history = list(NodeFailure.objects.filter(node=node, at__gte=since).order_by("at"))
    if 0 < report <= len(history):
        _report_failing(node, history, since, now)
    if 0 < cordon <= len(history):
        _cordon(node, len(history), since)


def _report_failing(node: str, history: list[NodeFailure], since: datetime, now: datetime) -> None:
    """Tell the platform admins (event ``node.gpu_failures``), once a day, with the node's
    failure history."""
    lines = [
        f"- {timezone.localtime(f.at):%Y-%m-%d %H:%M}: GPU {f.gpu}, {xid_text(f.xid)}"
        + (f", job #{f.job_id} (pod {f.pod})" if f.job_id else "")
        for f in history
    ]
    jobs = f"{len(history)} job{'s' if len(history) != 1 else ''}"
    body = "\n".join(
        [
            f"GPUs of node {node} failed {jobs} since {timezone.localtime(since):%Y-%m-%d %H:%M}:",
            *lines,
            "",
            f"The cluster page's GPU health panel: {settings.PORTAL_URL}/monitoring/",
        ]
    )
    day = timezone.localdate(now)
    for admin in User.objects.filter(is_superuser=True, is_active=True):
        notice_publish(
            notice=Notice(
                key=f"node.gpu_failures:{node}:{day}",
                event="node.gpu_failures",
                user_id=admin.pk,
                team_id=None,
                subject=f"Node {node}: GPUs failed {jobs}",
                body=body,
                payload={"node": node, "failures": len(history), "since": since.isoformat()},
            )
        )


def _cordon(node: str, failures: int, since: datetime) -> None:
    """Cordon the node; audited. A cluster that refuses is logged: the failures stay shown."""
    try:
        kube.cordon(node)
    except kube.ClusterError as exc:
        logger.error("node %s: %s GPU failures, not cordoned: %s", node, failures, exc.message)
        return
    logger.warning("node %s cordoned: %s GPU failures since %s", node, failures, since)
    audit_record(
        actor=None,
        action="node.cordon",
        target=f"Node {node}",
        changes={"gpu_failures": failures, "since": since.isoformat()},
    )
