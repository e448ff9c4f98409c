"""Two real local clusters behind one portal: a team's namespace, quota and policies are in
each cluster where it has quota and nowhere else; a job runs on the cluster its spec names
(its objects there), each cluster is tracked alone, and one whose API server is stopped
marks itself unreachable while no job changes, new ``any`` jobs go to the other, and
tracking resumes when it is back (no restart of anything)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from django.conf import settings
from django.contrib.auth.models import User
from django.core.management import call_command
from django.test import Client
from kubernetes import client, config

from cluster.models import Cluster
from jobs.models import Job, JobState
from jobs.services.submit import job_submit
from scheduling.resources import ANY_GPU
from teams.models import Team
from teams.services import quota_set
from tests.conftest import api_client_for, training_spec
from tests.sandbox_process import SandboxProcess, start_sandbox
from tests.worker_process import WorkerProcess, wait_for, wait_job

pytestmark = pytest.mark.django_db(transaction=True)
OWN_CLUSTER = True  # its second cluster is stopped and started again

EAST = "h200-east"


@pytest.fixture(scope="module")
def east(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SandboxProcess]:
    """The second cluster: a real control plane of its own with its simulated GPU nodes."""
    proc = start_sandbox(tmp_path_factory.mktemp("east"), profile="small", speed=30.0)
    yield proc
    proc.stop(timeout=30)


@pytest.fixture
def seeded(worker_env: dict[str, str], east: SandboxProcess) -> dict[str, User]:
    call_command("seed_demo", verbosity=0, stdout=open("/dev/null", "w"))  # noqa: SIM115
    second = Cluster.objects.create(
        name=EAST, access=Cluster.Access.KUBECONFIG, kubeconfig_path=str(east.kubeconfig)
    )
    # vision has quota on both clusters; the other teams on the first alone
    vision = Team.objects.get(slug="vision")
    quota_set(actor=None, team=vision, resource=ANY_GPU, limit=8, cluster=second)
    return {u.username: u for u in User.objects.all()}


def _namespaced(sandbox: SandboxProcess, namespace: str) -> dict[str, Any]:
    """The team's namespace in a cluster, with its ResourceQuota's GPU limit and its
    NetworkPolicies; None when there is no such namespace."""
    api = config.new_client_from_config(config_file=str(sandbox.kubeconfig))
    core, net = client.CoreV1Api(api), client.NetworkingV1Api(api)
    if namespace not in {n.metadata.name for n in core.list_namespace().items}:
        return {}
    quotas = core.list_namespaced_resource_quota(namespace).items
    return {
        "gpus": {q.spec.hard.get(f"requests.{ANY_GPU}") for q in quotas},
        "policies": {p.metadata.name for p in net.list_namespaced_network_policy(namespace).items},
    }


def test_a_teams_namespace_quota_and_policies_are_where_it_has_quota_and_nowhere_else(
    seeded: dict[str, User], cluster: SandboxProcess, east: SandboxProcess
) -> None:
    # When the teams are mirrored into the clusters
    call_command("cluster_sync", stdout=open("/dev/null", "w"))  # noqa: SIM115
    # Then vision is in both, each with its quota there (on the first, its 16 and the 8
    # robotics lends it in their cohort; on the second, its 8, no other team lending there);
    # nlp in the first alone
    first, second = _namespaced(cluster, "team-vision"), _namespaced(east, "team-vision")
    assert first["gpus"] == {"24"} and second["gpus"] == {"8"}, (first, second)
    assert first["policies"] and second["policies"] == first["policies"]
    assert _namespaced(cluster, "team-nlp") and _namespaced(east, "team-nlp") == {}


def _jobs_in(sandbox: SandboxProcess, namespace: str) -> set[str]:
    api = client.BatchV1Api(config.new_client_from_config(config_file=str(sandbox.kubeconfig)))
    return {j.metadata.name for j in api.list_namespaced_job(namespace).items}


def _cluster(name: str) -> Cluster:
    return Cluster.objects.get(name=name)


def test_jobs_run_on_their_clusters_and_one_cluster_down_changes_no_job(
    seeded: dict[str, User], worker: WorkerProcess, cluster: SandboxProcess, east: SandboxProcess
) -> None:
    alice = seeded["alice"]
    long_run: dict[str, Any] = {"env": {"SANDBOX_DURATION": "60m"}}  # 2 min at speed 30
    here = job_submit(
        user=alice, data=training_spec(name="here", cluster=settings.CLUSTER_NAME, **long_run)
    )
    there = job_submit(user=alice, data=training_spec(name="there", cluster=EAST, **long_run))

    # Each runs where its spec says: its Job object in that cluster alone, the team's
    # namespace made in the second cluster at its first apply
    wait_job(here, JobState.RUNNING, timeout=60)
    wait_job(there, JobState.RUNNING, timeout=60)
    assert there.object_name in _jobs_in(east, "team-vision")
    assert there.object_name not in _jobs_in(cluster, "team-vision")
    assert here.object_name not in _jobs_in(east, "team-vision")
    # ...and another team's user finds neither
    carol = api_client_for(seeded["carol"])
    assert {carol.get(f"/api/v1/jobs/{j.pk}/").status_code for j in (here, there)} == {404}

    east.stop(timeout=30)
    try:
        # The second cluster's API server is gone: the reconcile marks it unreachable...
        wait_for(lambda: _cluster(EAST).unreachable_since is not None, timeout=40)
        assert _cluster(settings.CLUSTER_NAME).unreachable_since is None
        # ...its job keeps its state (and says why it may be stale), the other's too
        assert set(Job.objects.values_list("state", flat=True)) == {JobState.RUNNING}
        browser = Client()
        browser.force_login(alice)
        page = browser.get(f"/jobs/{there.pk}/")
        assert page.status_code == 200 and "cluster unreachable since" in page.content.decode()
        # ...and a job for any cluster goes to the one that answers
        new = job_submit(user=alice, data=training_spec(name="anywhere"))
        assert new.cluster is not None and new.cluster.name == settings.CLUSTER_NAME
        wait_job(new, JobState.RUNNING, timeout=60)
    finally:
        east.start(reset=False)

    # It answers again: marked so, and its job is tracked where it runs (no restart)
    wait_for(lambda: _cluster(EAST).unreachable_since is None, timeout=60)
    Job.objects.filter(pk=there.pk).update(message="")  # the next observation writes it
    wait_for(lambda: Job.objects.get(pk=there.pk).message != "", timeout=60)
    assert Job.objects.get(pk=there.pk).state == JobState.RUNNING
    assert not Job.objects.filter(state=JobState.FAILED).exists()
