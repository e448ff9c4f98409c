"""Nothing is lost when a worker dies mid-apply or the API server is down for a while;
team bootstrap is idempotent."""

from __future__ import annotations

import io
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.core.management import call_command
from django.core.management.base import CommandError
from kubernetes import client, config

from cluster import kube
from jobs.models import Job, JobState
from jobs.services.submit import job_submit
from jobs.tracking.reconcile import cluster_reconcile
from teams.cluster_sync import team_cluster_sync
from teams.models import AuditLog, Team
from tests.conftest import training_spec
from tests.sandbox_process import SandboxProcess
from tests.worker_process import WorkerProcess, wait_for, wait_job

pytestmark = pytest.mark.django_db(transaction=True)
OWN_CLUSTER = True  # it breaks, stops or restarts it


@pytest.fixture
def seeded(worker_env: dict[str, str]) -> dict[str, User]:
    call_command("seed_demo", verbosity=0, stdout=open("/dev/null", "w"))  # noqa: SIM115
    return {u.username: u for u in User.objects.all()}


def api(sandbox: SandboxProcess) -> client.ApiClient:
    return config.new_client_from_config(config_file=str(sandbox.kubeconfig))


def test_team_bootstrap_creates_everything_once_then_changes_nothing(
    seeded: dict[str, User], cluster: SandboxProcess
) -> None:
    vision = Team.objects.get(slug="vision")

    team_cluster_sync(team_id=vision.pk)  # the namespace may exist from earlier tests
    second = team_cluster_sync(team_id=vision.pk)

    assert set(second.values()) == {"unchanged"}
    core = client.CoreV1Api(api(cluster))
    namespace = core.read_namespace("team-vision")
    assert namespace.metadata.labels["pod-security.kubernetes.io/enforce"] == "restricted"
    quota = core.read_namespaced_resource_quota("gpu-portal-quota", "team-vision")
    # 16 of its own and the 8 robotics lends in cohort research: the ResourceQuota allows
    # what vision may legitimately reach; the portal's admission guards the cohort's total
    assert quota.spec.hard["requests.nvidia.com/gpu"] == "24"
    # no one in the cohort lends MIG slices or time-sliced GPUs: those stay at nominal
    assert quota.spec.hard["requests.nvidia.com/mig-1g.10gb"] == "8"
    assert quota.spec.hard["requests.nvidia.com/gpu.shared"] == "8"
    assert quota.spec.hard["requests.nvidia.com/mig-2g.20gb"] == "0"
    assert core.read_namespaced_limit_range("gpu-portal-defaults", "team-vision")
    policy = client.NetworkingV1Api(api(cluster)).read_namespaced_network_policy(
        "gpu-portal-isolation", "team-vision"
    )
    # Every pod of the namespace; ingress from itself, Prometheus and the ingress controller.
    assert policy.spec.pod_selector.match_labels is None
    assert policy.spec.policy_types == ["Ingress"]
    (rule,) = policy.spec.ingress
    assert [p.namespace_selector and p.namespace_selector.match_labels for p in rule._from] == [
        None,
        {"kubernetes.io/metadata.name": "monitoring"},
        {"kubernetes.io/metadata.name": "ingress-nginx"},
    ]
    classes = {
        pc.metadata.name: pc
        for pc in client.SchedulingV1Api(api(cluster)).list_priority_class().items
    }
    assert classes["gpu-low"].preemption_policy == "Never"
    assert classes["gpu-critical"].value == 1_000_000


def test_network_policy_follows_the_settings_and_every_change_is_audited(
    seeded: dict[str, User], cluster: SandboxProcess, settings: Any
) -> None:
    speech = Team.objects.get(slug="speech")
    networking = client.NetworkingV1Api(api(cluster))
    team_cluster_sync(team_id=speech.pk)
    AuditLog.objects.all().delete()

    # Egress restricted: DNS plus the allowed networks only.
    settings.TEAM_NETWORK_POLICY_EGRESS_CIDRS = ["10.0.0.0/8"]
    settings.TEAM_NETWORK_POLICY_INGRESS_NAMESPACES = ["prometheus"]
    outcome = team_cluster_sync(team_id=speech.pk)
    assert outcome["NetworkPolicy/gpu-portal-isolation"] == "updated"
    policy = networking.read_namespaced_network_policy("gpu-portal-isolation", "team-speech")
    assert policy.spec.policy_types == ["Ingress", "Egress"]
    dns, networks = policy.spec.egress
    assert {(p.protocol, p.port) for p in dns.ports} == {("UDP", 53), ("TCP", 53)}
    assert [t.ip_block.cidr for t in networks.to] == ["10.0.0.0/8"]
    assert policy.spec.ingress[0]._from[1].namespace_selector.match_labels == {
        "kubernetes.io/metadata.name": "prometheus"
    }
    assert team_cluster_sync(team_id=speech.pk)["NetworkPolicy/gpu-portal-isolation"] == (
        "unchanged"
    )

    # Off (a cluster whose network plugin ignores NetworkPolicy): the portal removes its own.
    settings.TEAM_NETWORK_POLICY = False
    assert team_cluster_sync(team_id=speech.pk)["NetworkPolicy/gpu-portal-isolation"] == ("deleted")
    assert team_cluster_sync(team_id=speech.pk)["NetworkPolicy/gpu-portal-isolation"] == ("absent")
    names = [
        i.metadata.name for i in networking.list_namespaced_network_policy("team-speech").items
    ]
    assert "gpu-portal-isolation" not in names and "gpu-portal-workspaces" not in names
    audited = list(AuditLog.objects.order_by("id").values_list("action", "target"))
    assert audited == [
        ("team.network_policy_updated", "speech: NetworkPolicy team-speech/gpu-portal-isolation"),
        ("team.network_policy_deleted", "speech: NetworkPolicy team-speech/gpu-portal-isolation"),
        (
            "team.network_policy_deleted",
            "speech: NetworkPolicy team-speech/gpu-portal-workspaces",
        ),
    ]


def test_cluster_sync_command_mirrors_every_team_and_names_what_failed(
    seeded: dict[str, User], cluster: SandboxProcess, settings: Any, tmp_path: Any
) -> None:
    out = io.StringIO()
    call_command("cluster_sync", stdout=out)
    lines = out.getvalue().splitlines()
    assert lines[0].startswith("GPU catalog: ")
    assert {line.split(" ")[1] for line in lines[1:]} == set(
        Team.objects.values_list("slug", flat=True)
    )
    core = client.CoreV1Api(api(cluster))
    assert core.read_namespaced_resource_quota("gpu-portal-quota", "team-robotics")
    # Run again: nothing to change.
    again = io.StringIO()
    call_command("cluster_sync", "--team", "robotics", stdout=again)
    assert again.getvalue().splitlines()[1] == "team robotics (team-robotics): unchanged"
    # A cluster it cannot reach: every part that failed is named, and the exit is an error.
    kubeconfig = settings.KUBECONFIG
    settings.KUBECONFIG = str(tmp_path / "missing-kubeconfig")
    kube.reset_client()
    errors = io.StringIO()
    try:
        with pytest.raises(CommandError, match="Not mirrored: the GPU catalog, team nlp"):
            call_command("cluster_sync", stdout=io.StringIO(), stderr=errors)
    finally:
        settings.KUBECONFIG = kubeconfig  # the fixture's clean-up needs the cluster
        kube.reset_client()
    assert "team nlp: No cluster configured" in errors.getvalue()


def test_quota_change_updates_the_resource_quota(
    seeded: dict[str, User], cluster: SandboxProcess
) -> None:
    nlp = Team.objects.get(slug="nlp")
    team_cluster_sync(team_id=nlp.pk)
    nlp.quotas.filter(resource="NVIDIA-A100-SXM4-80GB").update(limit=4)

    outcome = team_cluster_sync(team_id=nlp.pk)

    assert outcome["ResourceQuota/gpu-portal-quota"] == "updated"
    quota = client.CoreV1Api(api(cluster)).read_namespaced_resource_quota(
        "gpu-portal-quota", "team-nlp"
    )
    # Per-product quotas are summed into requests.nvidia.com/gpu (Kubernetes knows no products).
    assert quota.spec.hard["requests.nvidia.com/gpu"] == "4"


def test_worker_killed_during_apply_leaves_exactly_one_job_object(
    seeded: dict[str, User], worker_env: dict[str, str], cluster: SandboxProcess, tmp_path
) -> None:
    # Given a distributed job (a Service, then a Job) and a worker we kill as soon as the
    # Service exists: the crash lands between the two creates.
    core, batch = client.CoreV1Api(api(cluster)), client.BatchV1Api(api(cluster))
    worker = WorkerProcess(tmp_path / "w1", worker_env).start()
    job = job_submit(
        user=seeded["alice"],
        data=training_spec(
            name="crashy", gpu={"count": 1}, workers=2, env={"SANDBOX_DURATION": "60s"}
        ),
    )

    def service_exists() -> bool:
        names = {s.metadata.name for s in core.list_namespaced_service("team-vision").items}
        return job.object_name in names

    wait_for(service_exists, timeout=30, interval=0.02)
    worker.kill()

    # When a new worker comes up (redelivery after the visibility timeout, or the reconcile
    # re-queuing the lost apply)
    replacement = WorkerProcess(tmp_path / "w2", worker_env).start()
    try:
        done = wait_for(
            lambda: (j := Job.objects.get(pk=job.pk)).state == JobState.SUCCEEDED and j,
            timeout=90,
        )
    finally:
        replacement.stop()

    # Then exactly one Job object was ever created for it, and it ran to the end
    jobs = batch.list_namespaced_job(
        "team-vision", label_selector=f"gpu-portal.dev/job-id={job.pk}"
    ).items
    assert [j.metadata.name for j in jobs] == [job.object_name]
    assert done.events.filter(reason="Applied").count() == 1


def test_api_server_down_for_a_while_loses_no_job(
    seeded: dict[str, User], worker: WorkerProcess, cluster: SandboxProcess
) -> None:
    job = job_submit(
        user=seeded["alice"], data=training_spec(name="patient", env={"SANDBOX_DURATION": "5m"})
    )
    wait_for(lambda: Job.objects.get(pk=job.pk).state == JobState.RUNNING, timeout=40)

    cluster.stop()
    try:
        # The reconcile keeps failing to reach the cluster for a while...
        wait_for(lambda: "Cluster unreachable" in worker.tail(20000), timeout=20)
        queued = job_submit(user=seeded["bob"], data=training_spec(name="during-outage"))
        # (a pass of ours is skipped while the worker's holds the reconcile's lock)
        report = wait_for(lambda: (r := cluster_reconcile()) and not r.skipped and r, timeout=60)
        assert "unreachable" in report.cluster_error
        # ...and no job is marked failed or lost because of it.
        assert Job.objects.get(pk=job.pk).state == JobState.RUNNING
    finally:
        cluster.start(reset=False)

    # Tracking resumes: the running job finishes, the one submitted during the outage runs
    # (16 s on an idle machine; the bounds leave room for a restart on a loaded one).
    wait_job(job, JobState.SUCCEEDED, timeout=120)
    wait_job(queued, JobState.RUNNING, JobState.SUCCEEDED, timeout=120)
    assert not Job.objects.filter(state=JobState.FAILED).exists()


def test_catalog_is_refreshed_from_the_nodes_gpu_labels(cluster: SandboxProcess) -> None:
    # Given an empty catalog (a new installation connected to a cluster)
    from cluster.models import CatalogSettings, GpuProduct, MigProfile
    from cluster.services import catalog_refresh

    added = catalog_refresh()

    # Then the GPUs of the small sandbox profile are offered, with real per-node maxima
    assert set(added["products"]) == {"NVIDIA-A100-SXM4-80GB", "Tesla-T4"}
    a100 = GpuProduct.objects.get(name="NVIDIA-A100-SXM4-80GB")
    assert (a100.gpus_per_node, a100.memory_mib) == (8, 81920)
    assert set(MigProfile.objects.values_list("name", flat=True)) == {
        "1g.10gb",
        "2g.20gb",
        "3g.40gb",
    }
    assert MigProfile.objects.get(name="1g.10gb").max_per_node == 14
    assert CatalogSettings.objects.get().shared_gpu_resource == "nvidia.com/gpu.shared"
    # and running it again adds nothing
    assert catalog_refresh() == {"products": [], "mig_profiles": []}
