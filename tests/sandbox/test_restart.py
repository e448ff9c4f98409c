"""Persistence: a restarted (or killed) sandbox keeps objects, events and running pods."""

from __future__ import annotations

import signal

import pytest
from conftest import SPEED, job_manifest, make_client, wait_for
from kubernetes import client

from tests.sandbox_process import start_sandbox


@pytest.mark.parametrize("hard", [False, True], ids=["sigterm", "sigkill"])
def test_restart_keeps_state_and_running_pods(tmp_path, hard):
    proc = start_sandbox(tmp_path, profile="small", speed=SPEED, control_plane="python")
    try:
        core = client.CoreV1Api(make_client(proc))
        batch = client.BatchV1Api(make_client(proc))
        core.create_namespace({"metadata": {"name": "keep"}})
        batch.create_namespaced_job(
            "keep",
            job_manifest(
                "long", {"nvidia.com/gpu": 1}, annotations={"sandbox.gpu-portal.dev/duration": "1h"}
            ),
        )
        pod = wait_for(
            lambda: next(
                (p for p in core.list_namespaced_pod("keep").items if p.status.phase == "Running"),
                None,
            )
        )
        log_before = core.read_namespaced_pod_log(pod.metadata.name, "keep")
        rv_before = int(core.list_namespaced_pod("keep").metadata.resource_version)
        # when the process restarts on the same state file
        proc.restart(hard=hard)
        core = client.CoreV1Api(make_client(proc))
        batch = client.BatchV1Api(make_client(proc))
        # then the pod is the same, still running, with its log continuing
        after = core.read_namespaced_pod(pod.metadata.name, "keep")
        assert after.metadata.uid == pod.metadata.uid
        assert after.status.phase == "Running"
        assert after.spec.node_name == pod.spec.node_name
        log_after = core.read_namespaced_pod_log(pod.metadata.name, "keep")
        assert log_after.startswith(log_before.splitlines()[0])
        assert len(log_after) >= len(log_before)
        assert int(core.list_namespaced_pod("keep").metadata.resource_version) >= rv_before
        assert batch.read_namespaced_job("long", "keep").status.active == 1
        assert core.list_namespaced_event("keep", field_selector="reason=Scheduled").items
        # and new work still runs
        batch.create_namespaced_job(
            "keep",
            job_manifest(
                "after",
                {"cpu": "100m"},
                tolerate=False,
                annotations={"sandbox.gpu-portal.dev/duration": "10s"},
            ),
        )
        wait_for(lambda: batch.read_namespaced_job("after", "keep").status.succeeded)
    finally:
        code = proc.stop()
    assert code in (0, -signal.SIGTERM)
