"""The idle-GPU policy against a real Prometheus scraping a real sandbox, with jobs run by a
real Celery worker: warn, then act after the grace period; busy again stops the countdown;
exempt jobs, young jobs and jobs without metrics are left alone."""

from __future__ import annotations

import time
from datetime import timedelta
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.utils import timezone
from kubernetes import client, config

from jobs.models import Job, JobState
from jobs.services.submit import job_submit
from monitoring.prometheus import MetricsUnavailable
from monitoring.services import idle_policy_run
from monitoring.tasks import idle_policy_task
from notifications.models import Delivery
from teams.models import AuditLog, Team
from tests.conftest import api_client_for, inference_spec
from tests.factories import JobFactory
from tests.monitoring.conftest import submit_running
from tests.monitoring.prometheus_process import PrometheusProcess
from tests.receivers import free_port
from tests.sandbox_process import SandboxProcess
from tests.worker_process import wait_for

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def act(users: dict[str, User], metrics: PrometheusProcess, settings: Any) -> dict[str, User]:
    """Team vision warns after 6 idle seconds and acts 6 seconds after the warning."""
    settings.IDLE_GPU_WINDOW_MINUTES = 0.1
    Team.objects.filter(slug="vision").update(
        idle_policy=Team.IdlePolicy.ACT, idle_grace_minutes=0.1
    )
    return users


def fresh(job: Job) -> Job:
    return Job.objects.get(pk=job.pk)


def warn(job: Job) -> Job:
    wait_for(lambda: job.pk in idle_policy_run().warned, timeout=40, interval=1)
    return fresh(job)


def test_an_idle_training_job_is_warned_then_cancelled_after_the_grace_period(
    act: dict[str, User],
) -> None:
    # Given an idle training job and a busy one in a team that acts
    idle = submit_running(act["alice"], name="idler", env={"SANDBOX_IDLE": "true"})
    busy = submit_running(act["alice"], name="busy", env={})

    # When the policy finds it idle for the window
    warned = warn(idle)

    # Then its owner is warned, naming the GPUs and when it will be stopped
    assert warned.state == JobState.RUNNING
    assert warned.idle_action_due is not None and warned.idle_warned_at is not None
    grace = (warned.idle_action_due - warned.idle_warned_at).total_seconds()
    assert grace == pytest.approx(6.0, abs=0.01)
    warning = warned.events.get(reason="IdleGPUs")
    assert warning.message.startswith("All 1 GPU(s) stayed under 5% utilisation")
    node = warned.placement["nodes"][0]
    assert f"{node} GPU " in warning.message
    assert f"will cancel it at {warned.idle_action_due:%H:%M} UTC" in warning.message

    # And when it is still idle after the grace period, it is cancelled
    wait_for(lambda: idle.pk in idle_policy_run().stopped, timeout=30, interval=1)
    stopped = fresh(idle)
    assert (stopped.state, stopped.reason) == (JobState.CANCELLED, "IdleStopped")
    assert stopped.message.startswith("Cancelled by team vision's idle-GPU policy: warned at")
    assert stopped.events.filter(reason="IdleStopped").count() == 1
    audit = AuditLog.objects.get(action="job.idle_stop")
    assert audit.actor is None and str(idle.pk) in audit.target
    # the worker tells alice (on by default) and deletes its objects; the busy job runs on
    delivery = wait_for(
        lambda: Delivery.objects.filter(event="job.idle_stopped").first(), timeout=20
    )
    assert delivery.subject == (
        f"[GPU Portal] vision/idler #{idle.pk} was stopped for holding GPUs idle"
    )
    assert fresh(busy).state == JobState.RUNNING
    assert fresh(busy).idle_warned_at is None


def test_a_job_busy_again_stops_its_countdown(
    act: dict[str, User], sandbox: SandboxProcess
) -> None:
    idle = submit_running(act["alice"], name="sleepy", env={"SANDBOX_IDLE": "true"})
    warned = warn(idle)

    # When its GPUs get busy (the sandbox's annotation wins over the env hint)
    core = client.CoreV1Api(config.new_client_from_config(config_file=str(sandbox.kubeconfig)))
    pod = warned.placement["pods"][0]["name"]
    core.patch_namespaced_pod(
        pod, warned.namespace, {"metadata": {"annotations": {"sandbox.gpu-portal.dev/idle": "0"}}}
    )

    # Then the next runs stop the countdown, and it is never stopped
    wait_for(lambda: idle.pk in idle_policy_run().cleared, timeout=30, interval=1)
    time.sleep(7)  # past the old deadline
    assert idle.pk not in idle_policy_run().stopped
    cleared = fresh(idle)
    assert cleared.state == JobState.RUNNING
    assert cleared.idle_warned_at is None and cleared.idle_action_due is None
    entry = cleared.events.get(reason="IdleCleared")
    assert entry.message.startswith("Its GPUs are busy again (")
    assert "the countdown is stopped" in entry.message


def test_an_exempt_job_is_left_alone(act: dict[str, User]) -> None:
    idle = submit_running(act["alice"], name="exempt", env={"SANDBOX_IDLE": "true"})
    member = api_client_for(act["alice"]).post(
        f"/api/v1/jobs/{idle.pk}/idle-exempt/", {"reason": "mine"}, format="json"
    )
    assert member.status_code == 403

    lead = api_client_for(act["bob"]).post(
        f"/api/v1/jobs/{idle.pk}/idle-exempt/",
        {"reason": "waiting for a data transfer"},
        format="json",
    )

    assert lead.status_code == 200, lead.json()
    assert lead.json()["idle_exempt_reason"] == "waiting for a data transfer"
    deadline = time.monotonic() + 15  # longer than the window and the grace period
    while time.monotonic() < deadline:
        run = idle_policy_run()
        assert idle.pk not in run.warned + run.stopped + run.reported
        time.sleep(1)
    exempt = fresh(idle)
    assert exempt.state == JobState.RUNNING and exempt.idle_warned_at is None
    assert exempt.events.get(reason="IdleExempt").message == (
        "Exempted by bob: waiting for a data transfer"
    )
    assert AuditLog.objects.filter(action="job.idle_exempt", actor=act["bob"]).count() == 1


def test_missing_metrics_never_trigger_an_action(act: dict[str, User], settings: Any) -> None:
    # Given a job whose countdown ran out but of which Prometheus has no samples (its pod
    # is not in the cluster: an exporter gap), and a warned idle job
    vision = Team.objects.get(slug="vision")
    past = timezone.now() - timedelta(minutes=5)
    ghost = JobFactory(
        team=vision,
        owner=act["alice"],
        state=JobState.RUNNING,
        started_at=past,
        placement={"nodes": ["gpu-a100-0"], "pods": [{"name": "ghost-0", "node": "gpu-a100-0"}]},
        idle_warned_at=past,
        idle_action_due=past,
    )
    idle = submit_running(act["alice"], name="idler", env={"SANDBOX_IDLE": "true"})
    warn(idle)
    Job.objects.filter(pk=idle.pk).update(idle_action_due=past)

    # When Prometheus cannot be reached
    up = settings.PROMETHEUS_URL
    settings.PROMETHEUS_URL = f"http://127.0.0.1:{free_port()}"
    settings.PROMETHEUS_TIMEOUT = 0.5
    with pytest.raises(MetricsUnavailable):
        idle_policy_run()
    assert idle_policy_task.apply().get() == {}

    # Then nothing is stopped; and with Prometheus back, the job without samples is not
    assert fresh(idle).state == JobState.RUNNING
    settings.PROMETHEUS_URL = up
    assert ghost.pk not in idle_policy_run().stopped
    assert fresh(ghost).state == JobState.RUNNING


def test_a_job_younger_than_the_window_is_never_warned(
    users: dict[str, User], metrics: PrometheusProcess
) -> None:
    Team.objects.filter(slug="vision").update(
        idle_policy=Team.IdlePolicy.ACT, idle_window_minutes=10, idle_grace_minutes=0
    )
    idle = submit_running(users["alice"], name="newborn", env={"SANDBOX_IDLE": "true"})
    time.sleep(3)

    run = idle_policy_run()

    assert idle.pk not in run.warned + run.reported + run.stopped
    assert fresh(idle).idle_warned_at is None


def test_an_idle_inference_deployment_is_scaled_to_zero_and_resumed_in_one_click(
    act: dict[str, User], sandbox: SandboxProcess
) -> None:
    # Given an idle inference deployment of two replicas in a team that acts
    job = job_submit(
        user=act["alice"],
        data=inference_spec(
            name="idle-api",
            gpu={"count": 1, "product": "NVIDIA-A100-SXM4-80GB"},
            env={"SANDBOX_IDLE": "true"},
        ),
    )
    serving = wait_for(
        lambda: (j := fresh(job)).reason == "Available" and len(j.placement.get("pods", [])) == 2
        and j,
        timeout=40,
    )  # fmt: skip
    apps = client.AppsV1Api(config.new_client_from_config(config_file=str(sandbox.kubeconfig)))

    # When it is warned and still idle after the grace period
    warning = warn(serving).events.get(reason="IdleGPUs").message
    assert "will scale it to zero replicas at" in warning
    wait_for(lambda: job.pk in idle_policy_run().stopped, timeout=30, interval=1)

    # Then the Deployment has no replicas, the job says so, and nothing was deleted
    deployment = apps.read_namespaced_deployment(serving.object_name, serving.namespace)
    assert deployment.spec.replicas == 0
    scaled = wait_for(lambda: (j := fresh(job)).reason == "ScaledToZero" and j, timeout=30)
    assert scaled.state == JobState.RUNNING and scaled.scaled_to_zero_from == 2
    assert scaled.events.get(reason="IdleStopped").message.startswith(
        "Scaled to zero by team vision's idle-GPU policy: warned at"
    )
    assert AuditLog.objects.filter(action="job.idle_scale_to_zero").count() == 1

    # And its owner resumes it with one call: both replicas serve again
    resumed = api_client_for(act["alice"]).post(f"/api/v1/jobs/{job.pk}/resume/")
    assert resumed.status_code == 200, resumed.json()
    deployment = apps.read_namespaced_deployment(serving.object_name, serving.namespace)
    assert deployment.spec.replicas == 2
    back = wait_for(lambda: (j := fresh(job)).reason == "Available" and j, timeout=40)
    assert back.scaled_to_zero_from is None and back.idle_warned_at is None
    assert back.events.get(reason="Resumed").message == "Resumed by alice: 2 replica(s)."
    again = api_client_for(act["alice"]).post(f"/api/v1/jobs/{job.pk}/resume/")
    assert again.status_code == 409
