"""A job whose GPU or node fails says so and runs again elsewhere from its checkpoint: a real
sandbox GPU reports XID 79 under a running job (run by a real worker), Prometheus scrapes the
exporter, and the check explains the failure; a job that fails on its own (exit 1, healthy
GPUs) is left as it is; a node whose kubelet stops has its job evicted, explained and
resumed on another node; a TrainJob's failed GPU is handled as a Job's."""

from __future__ import annotations

import re
from datetime import datetime
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.core.management import call_command
from django.test import Client
from kubernetes import client, config

from cluster import kube
from cluster.launchers import launchers_forget
from jobs.models import Job, JobEvent, JobState
from jobs.services.submit import job_submit
from monitoring.gpu_failures import gpu_failures_check
from monitoring.models import NodeFailure
from notifications.events import event_for
from notifications.models import Delivery
from teams.models import AuditLog
from tests.conftest import api_client_for, training_spec
from tests.monitoring.conftest import instant
from tests.monitoring.prometheus_process import PrometheusProcess
from tests.sandbox_process import SandboxProcess, inject
from tests.worker_process import wait_for

pytestmark = pytest.mark.django_db(transaction=True)
OWN_CLUSTER = True  # it breaks, stops or restarts it


def running(job_id: int, timeout: float = 40) -> Job:
    """The job once it runs, with its pods placed."""
    return wait_for(
        lambda: (
            (j := Job.objects.get(pk=job_id)).state == JobState.RUNNING
            and j.placement.get("pods")
            and j
        ),
        timeout=timeout,
    )


def checkpoint_claim(name: str, namespace: str = "team-vision") -> str:
    """The team's claim for checkpoints, made as its members make theirs (the cluster's
    default StorageClass provisions it): a pod whose claim does not exist is never
    scheduled."""
    for manifest in (
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}},
        {
            "apiVersion": "v1",
            "kind": "PersistentVolumeClaim",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {
                "accessModes": ["ReadWriteOnce"],
                "resources": {"requests": {"storage": "1Gi"}},
            },
        },
    ):
        kube.ensure(manifest, compare=lambda existing, wanted: True)
    return name


def running_with_checkpoints(user: User, *, name: str, claim: str) -> Job:
    """A one-A100 training job of an hour that keeps checkpoints on ``claim``, running."""
    checkpoint_claim(claim)
    submitted = job_submit(
        user=user,
        data=training_spec(
            name=name,
            env={"SANDBOX_DURATION": "1h"},
            gpu={"count": 1, "product": "NVIDIA-A100-SXM4-80GB"},
            checkpoint={"claim": claim, "mount_path": "/checkpoints"},
        ),
    )
    return running(submitted.pk)


def test_a_job_whose_gpu_falls_off_the_bus_says_so(
    users: dict[str, User], metrics: PrometheusProcess, sandbox: SandboxProcess, settings: Any
) -> None:
    settings.GPU_FAILURE_CORDON_AFTER = 1  # a node cordoned at its first GPU failure
    settings.GPU_FAILURE_REPORT_AFTER = 1  # and reported to the platform admins
    # Given a running job that keeps checkpoints, and one that will fail on its own (exit 1,
    # healthy GPUs)
    job = running_with_checkpoints(users["alice"], name="ft", claim="ckpt")
    buggy = job_submit(
        user=users["alice"],
        data=training_spec(name="buggy", env={"SANDBOX_DURATION": "2s", "SANDBOX_EXIT_CODE": "1"}),
    )
    pod = job.placement["pods"][0]["name"]
    core = client.CoreV1Api(config.new_client_from_config(config_file=str(sandbox.kubeconfig)))
    # (it has saved a checkpoint: the sandbox trainer says so every 20 steps)
    wait_for(
        lambda: "GPU_PORTAL_CHECKPOINT step=" in core.read_namespaced_pod_log(pod, job.namespace),
        timeout=30,
    )
    held = wait_for(lambda: instant(metrics, f'DCGM_FI_DEV_GPU_UTIL{{pod="{pod}"}}'), timeout=20)
    node, gpu = held[0]["metric"]["Hostname"], held[0]["metric"]["gpu"]

    # When the job's GPU falls off the bus
    inject(sandbox, node=node, gpu=int(gpu), xid=79)
    for failing in (job, buggy):
        wait_for(lambda j=failing: Job.objects.get(pk=j.pk).state == JobState.FAILED, timeout=40)
    # (Prometheus has scraped the XID: a second, after the fault)
    wait_for(
        lambda: instant(metrics, f'DCGM_FI_DEV_XID_ERRORS{{Hostname="{node}",gpu="{gpu}"}} == 79'),
        timeout=20,
    )

    # Then the check explains it, once; the job that failed on its own keeps its own reason
    assert gpu_failures_check() == [job.pk]
    assert gpu_failures_check() == []
    # ...the node's history has it, and (set to 1 failure) the node is cordoned, audited
    (failure,) = NodeFailure.objects.all()
    assert (failure.node, failure.gpu, failure.xid, failure.job_id) == (node, gpu, 79, job.pk)
    assert core.read_node(node).spec.unschedulable is True
    assert AuditLog.objects.filter(action="node.cordon", target=f"Node {node}").exists()
    report = Delivery.objects.get(event="node.gpu_failures")
    assert report.destination.user == users["admin"]  # platform admins, no one else
    assert report.subject == f"Node {node}: GPUs failed 1 job"
    assert f"GPU {gpu}, XID 79 (GPU has fallen off the bus), job #{job.pk}" in report.body
    step = _explained_with_its_checkpoint(job, pod=pod, node=node, gpu=gpu)
    assert Job.objects.get(pk=buggy.pk).reason != "GPUFailure"
    assert Job.objects.get(pk=buggy.pk).state == JobState.FAILED  # not run again

    # And it runs again, on another node, told it is a restart, and resumes its checkpoint
    _runs_again_from(job, step=step, node=node, sandbox=sandbox)

    # The cluster page's GPU health: the GPU's XID in words, the node's GPU out of service
    _health_shows_the_failure(users, sandbox, node=node, gpu=gpu)


def _explained_with_its_checkpoint(job: Job, *, pod: str, node: str, gpu: str) -> int:
    """The job's GPUFailure entry names the pod, GPU, XID, the re-run and the checkpoint it
    resumes from, and the GPU-hours lost since; returns that checkpoint's step."""
    entry = JobEvent.objects.get(job=job, reason="GPUFailure")
    assert entry.type == "Warning"
    assert (
        f"pod {pod} failed: GPU {gpu} on node {node} reported XID 79 (GPU has fallen off the bus)"
        in entry.message
    )
    resume_at = re.search(
        rf"attempt 2 of 4\) away from node {node}, resuming from checkpoint step ([0-9,]+) in "
        "/checkpoints.",
        entry.message,
    )
    assert resume_at is not None, entry.message
    step = int(resume_at.group(1).replace(",", ""))
    lost = re.search(
        r"About ([0-9.]+) GPU-hours were lost since its last checkpoint \(step ", entry.message
    )
    assert lost is not None, entry.message
    recorded = Job.objects.get(pk=job.pk).gpu_hours_lost
    assert recorded == pytest.approx(float(lost.group(1)), abs=0.005)
    started, ended = (datetime.fromisoformat(t) for t in Job.objects.get(pk=job.pk).earlier_runs[0])
    # Less than the whole run (one GPU): only the time since the checkpoint is lost (the
    # container's finish time has whole seconds: a checkpoint in its last second costs 0)
    assert 0 <= recorded < (ended - started).total_seconds() / 3600
    event = event_for(state=None, reason="GPUFailure")
    assert event is not None and event.key == "job.gpu_failed"  # the owner is told
    return step


def _runs_again_from(job: Job, *, step: int, node: str, sandbox: SandboxProcess) -> None:
    """Run again on a node other than ``node``, told it is a restart, from ``step``."""
    again = running(job.pk, timeout=60)
    assert again.gpu_failure_retries == 1 and again.excluded_nodes == [node]
    assert [p["node"] for p in again.placement["pods"]] != [node]
    new_pod = again.placement["pods"][0]["name"]
    core = client.CoreV1Api(config.new_client_from_config(config_file=str(sandbox.kubeconfig)))
    env = {
        e.name: e.value
        for e in core.read_namespaced_pod(new_pod, job.namespace).spec.containers[0].env
    }
    assert env["RESTART_ATTEMPT"] == "1" and env["CHECKPOINT_DIR"] == "/checkpoints"
    log = wait_for(lambda: core.read_namespaced_pod_log(new_pod, job.namespace), timeout=20)
    # (the step the portal read from the failed pod's log is the one its claim holds)
    assert f"Resuming from checkpoint /checkpoints/step-{step}.pt at step {step} " in log
    assert [
        e.reason
        for e in JobEvent.objects.filter(job=job, reason__in=["GPUFailure", "Retrying", "Requeued"])
    ] == [
        "GPUFailure",
        "Retrying",
        "Requeued",
    ]
    assert len(again.earlier_runs) == 1  # the failed run's GPU-hours are kept


def _health_shows_the_failure(
    users: dict[str, User], sandbox: SandboxProcess, *, node: str, gpu: str
) -> None:
    core = client.CoreV1Api(config.new_client_from_config(config_file=str(sandbox.kubeconfig)))
    api = api_client_for(users["alice"])
    health = api.get("/api/v1/monitoring/cluster/").json()["gpu_health"]
    rows = {(h["node"], h["gpu"]): h for h in health}
    assert rows[(node, gpu)]["xid"] == 79
    assert rows[(node, gpu)]["xid_meaning"] == "GPU has fallen off the bus"
    assert rows[(node, "")]["unhealthy_gpus"] == 1 and rows[(node, "")]["ready"] == "True"
    assert rows[(node, "")]["failures_week"] == 1 and rows[(node, "")]["cordoned"] is True
    page = Client()
    page.force_login(users["alice"])
    html = page.get("/monitoring/").content.decode()
    assert f'data-gpu-health="{node}/{gpu}"' in html and "GPU has fallen off the bus" in html
    # Repaired: back in service; the last XID stays until the driver reloads
    inject(sandbox, node=node, gpu=int(gpu), repair=True)
    rows = {
        (h["node"], h["gpu"]): h
        for h in api.get("/api/v1/monitoring/cluster/").json()["gpu_health"]
    }
    assert rows[(node, "")]["unhealthy_gpus"] == 0 and rows[(node, gpu)]["xid"] == 79
    core.patch_node(node, {"spec": {"unschedulable": False}})  # uncordoned by an admin


def test_a_job_whose_node_stops_responding_runs_again_elsewhere_from_its_checkpoint(
    users: dict[str, User], sandbox: SandboxProcess, settings: Any
) -> None:
    # Given a running training job that keeps checkpoints on its claim, and leaves a node
    # that stopped responding after 10 s (NODE_FAILURE_TOLERATION_SECONDS; 60 by default),
    # not the API server's 300 s: the real node-lifecycle controller counts real seconds
    settings.NODE_FAILURE_TOLERATION_SECONDS = 10
    job = running_with_checkpoints(users["alice"], name="nf", claim="ckpt-nf")
    pod, node = job.placement["pods"][0]["name"], job.placement["pods"][0]["node"]
    core = client.CoreV1Api(config.new_client_from_config(config_file=str(sandbox.kubeconfig)))
    tolerations = core.read_namespaced_pod(pod, job.namespace).spec.tolerations
    assert {
        (t.key, t.effect, t.toleration_seconds)
        for t in tolerations
        if t.key and t.key.startswith("node.kubernetes.io/")
    } == {
        ("node.kubernetes.io/not-ready", "NoExecute", 10),
        ("node.kubernetes.io/unreachable", "NoExecute", 10),
    }
    wait_for(
        lambda: "GPU_PORTAL_CHECKPOINT step=" in core.read_namespaced_pod_log(pod, job.namespace),
        timeout=30,
    )

    # When its node's kubelet stops
    inject(sandbox, node=node, down=True)
    try:
        # Then the job says its node failed, in words naming the pod and the node...
        entry = wait_for(
            lambda: JobEvent.objects.filter(job=job, reason="NodeFailure").first(), timeout=60
        )
        assert entry.type == "Warning"
        assert entry.message.startswith(
            f"pod {pod} failed: node {node} stopped responding (its kubelet stopped posting "
            "status) and the pod was evicted at "
        ), entry.message
        assert "The node failed, not the program." in entry.message
        # ...the dead node's log cannot be read, so the loss is the whole run, at most...
        # (in the API server's words: its request to the node's kubelet failed)
        assert "At most " in entry.message and "could not be read: Get " in entry.message
        assert f"/containerLogs/{job.namespace}/{pod}/" in entry.message
        assert f"(attempt 2 of 4) away from node {node}, resuming from its newest checkpoint" in (
            entry.message
        )
        event = event_for(state=None, reason="NodeFailure")
        assert event is not None and event.key == "job.node_failed"  # the owner is told
        # ...and it runs again on another node (the stranded pod force-deleted), resuming
        # from the newest checkpoint its claim holds
        again = running(job.pk, timeout=60)
        assert again.reason != "NodeFailure" and again.excluded_nodes == [node]
        # (the API and the job's page say so: the attempt, the node avoided, the loss)
        shown = api_client_for(users["alice"]).get(f"/api/v1/jobs/{job.pk}/").json()
        assert (shown["restart_attempt"], shown["excluded_nodes"]) == (1, [node])
        assert shown["gpu_hours_lost"] > 0
        page = Client()
        page.force_login(users["alice"])
        html = page.get(f"/jobs/{job.pk}/").content.decode()
        assert f"restart attempt 1, avoiding node {node};" in html
        assert [p["node"] for p in again.placement["pods"]] != [node]
        assert pod not in [p.metadata.name for p in core.list_namespaced_pod(job.namespace).items]
        new_pod = again.placement["pods"][0]["name"]
        log = wait_for(lambda: core.read_namespaced_pod_log(new_pod, job.namespace), timeout=20)
        resumed = re.search(
            r"Resuming from checkpoint /checkpoints/step-(\d+)\.pt at step (\d+) "
            r"\(restart attempt 1\)",
            log,
        )
        assert resumed is not None and resumed.group(1) == resumed.group(2), log[:600]
        assert int(resumed.group(1)) >= 20 and int(resumed.group(1)) % 20 == 0
        # (the steps it runs start after the checkpoint, not from the beginning)
        first_step = next(line for line in log.splitlines() if "step" in line and "loss=" in line)
        assert "step 1/" not in first_step.split("loss=")[0]
        assert [
            e.reason
            for e in JobEvent.objects.filter(
                job=job, reason__in=["NodeFailure", "Retrying", "Requeued"]
            )
        ] == ["NodeFailure", "Retrying", "Requeued"]
    finally:
        inject(sandbox, node=node, down=False)


def test_a_trainjob_whose_gpu_fails_runs_again_from_its_checkpoint(
    users: dict[str, User], metrics: PrometheusProcess, sandbox: SandboxProcess
) -> None:
    # Given a running one-node TrainJob (Kubeflow Trainer's, on the portal's runtime) that
    # keeps checkpoints on its claim
    call_command("cluster_sync", stdout=open("/dev/null", "w"))  # noqa: SIM115
    launchers_forget()
    submitted = job_submit(
        user=users["alice"],
        data=training_spec(
            name="tj-ft",
            launcher="trainjob",
            env={"SANDBOX_DURATION": "1h"},
            gpu={"count": 1, "product": "NVIDIA-A100-SXM4-80GB"},
            checkpoint={"claim": checkpoint_claim("ckpt-tj"), "mount_path": "/checkpoints"},
        ),
    )
    job = running(submitted.pk)
    assert [m["kind"] for m in job.manifests] == ["TrainJob"]
    pod = job.placement["pods"][0]["name"]
    core = client.CoreV1Api(config.new_client_from_config(config_file=str(sandbox.kubeconfig)))
    wait_for(
        lambda: "GPU_PORTAL_CHECKPOINT step=" in core.read_namespaced_pod_log(pod, job.namespace),
        timeout=30,
    )
    held = wait_for(lambda: instant(metrics, f'DCGM_FI_DEV_GPU_UTIL{{pod="{pod}"}}'), timeout=20)
    node, gpu = held[0]["metric"]["Hostname"], held[0]["metric"]["gpu"]
    # When its GPU falls off the bus
    inject(sandbox, node=node, gpu=int(gpu), xid=79)
    wait_for(lambda: Job.objects.get(pk=job.pk).state == JobState.FAILED, timeout=40)
    wait_for(
        lambda: instant(metrics, f'DCGM_FI_DEV_XID_ERRORS{{Hostname="{node}",gpu="{gpu}"}} == 79'),
        timeout=20,
    )
    # Then the check explains it, and the TrainJob runs again elsewhere from its checkpoint
    try:
        assert gpu_failures_check() == [job.pk]
        step = _explained_with_its_checkpoint(job, pod=pod, node=node, gpu=gpu)
        _runs_again_from(job, step=step, node=node, sandbox=sandbox)
    finally:
        inject(sandbox, node=node, gpu=int(gpu), repair=True)
