"""Jobs on several clusters: the spec's ``cluster`` (a name, or ``any``), where a job is
placed and why, every call about a job going to its own cluster, and each cluster's
reconcile following only its own jobs (one that does not answer changes none of them).

The clusters here are rows the adapter is bound to; their objects are the adapter's
``list_all`` answering per bound cluster (``FakeClusters``). Two real local clusters are
``tests/integration``'s."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.conf import settings
from django.contrib.auth.models import User
from django.test import Client
from django.utils import timezone

from cluster import kube
from cluster.models import Cluster
from cluster.services import cluster_first
from core.errors import ApplicationError
from jobs.admission.decisions import admission_preview
from jobs.cluster_scope import in_job_cluster
from jobs.models import Job, JobState
from jobs.selectors.fit import FitPreview
from jobs.selectors.jobs import quota_usage
from jobs.services.admission import admission_run
from jobs.services.placement import clusters_for, job_place
from jobs.services.submit import job_submit
from jobs.tracking.reconcile import cluster_reconcile
from scheduling.resources import ANY_GPU as GPU
from teams.models import Team
from teams.services import quota_set
from tests.conftest import api_client_for, training_spec
from tests.factories import JobFactory, TeamFactory
from tests.jobs.test_reconcile_events import FakeCluster

pytestmark = pytest.mark.django_db


def second_cluster(name: str = "h200-east", **fields: Any) -> Cluster:
    return Cluster.objects.create(
        name=name, access=Cluster.Access.KUBECONFIG, kubeconfig_path=f"/etc/portal/{name}", **fields
    )


def gpus_for(team: str, cluster: Cluster, limit: int = 8) -> None:
    """Quota for ``team`` on ``cluster``: a team's quota is per cluster."""
    quota_set(
        actor=None, team=Team.objects.get(slug=team), resource=GPU, limit=limit, cluster=cluster
    )


class FakeClusters:
    """One ``FakeCluster`` per cluster name: ``list_all`` answers for the bound cluster; a
    name in ``down`` does not answer."""

    def __init__(self) -> None:
        self.by_name: dict[str, FakeCluster] = {}
        self.down: set[str] = set()

    def __getitem__(self, name: str) -> FakeCluster:
        return self.by_name.setdefault(name, FakeCluster())

    def list_all(self, kind: str, **kwargs: Any) -> list[dict[str, Any]]:
        name = kube.current_cluster().name
        if name in self.down:
            raise kube.TemporaryClusterError(f"connection refused ({name})")
        return self[name].list_all(kind, **kwargs)


def test_a_spec_naming_an_unknown_cluster_is_refused_naming_the_field(alice: User) -> None:
    second_cluster()
    before = Job.objects.count()

    with pytest.raises(ApplicationError) as refused:
        job_submit(user=alice, data=training_spec(name="nowhere", cluster="a100-south"))

    message = refused.value.field_errors["cluster"][0]
    assert "no cluster 'a100-south'" in message
    assert f"{settings.CLUSTER_NAME}, h200-east, or 'any'" in message
    assert Job.objects.count() == before


def test_a_draining_cluster_takes_no_new_job_and_any_passes_it_over(alice: User) -> None:
    second_cluster(state=Cluster.State.DRAINING)

    with pytest.raises(ApplicationError) as refused:
        job_submit(user=alice, data=training_spec(name="drained", cluster="h200-east"))
    assert "is draining: it takes no new work" in refused.value.field_errors["cluster"][0]

    assert [c.name for c in clusters_for("any")] == [settings.CLUSTER_NAME]


def test_a_job_runs_on_the_cluster_its_spec_names(alice: User) -> None:
    gpus_for("vision", second_cluster())

    response = api_client_for(alice).post(
        "/api/v1/jobs/", training_spec(name="named", cluster="h200-east"), format="json"
    )

    assert response.status_code == 201, response.content
    job = Job.objects.get(pk=response.json()["id"])
    assert job.cluster is not None and job.cluster.name == "h200-east"
    assert response.json()["cluster"] == "h200-east"
    assert response.json()["spec"]["cluster"] == "h200-east"


def test_any_with_one_cluster_places_the_job_there_without_asking(alice: User) -> None:
    job = job_submit(user=alice, data=training_spec(name="only-one"))

    assert job.cluster == cluster_first()
    assert job.spec["cluster"] == "any"
    assert not job.events.filter(reason="Placed").exists()


def test_any_takes_the_cluster_where_the_job_would_start_soonest_and_says_why() -> None:
    first, second = cluster_first(), second_cluster()
    answers = {
        first.name: FitPreview("waits", "No node has 8 free GPUs.", quota="nominal"),
        second.name: FitPreview("fits", "Fits now on h200-0.", ["h200-0"], quota="nominal"),
    }

    placement = job_place(clusters_for("any"), lambda cluster: answers[cluster.name])

    assert placement.cluster == second
    assert placement.fit is answers[second.name]
    assert placement.reason == (
        f"Placed on h200-east ({first.name}: waits for GPUs to free; h200-east: fits now)."
    )


def test_any_passes_over_a_cluster_that_does_not_answer_while_another_does() -> None:
    second_cluster(unreachable_since=timezone.now())

    assert [c.name for c in clusters_for("any")] == [settings.CLUSTER_NAME]
    Cluster.objects.filter(name=settings.CLUSTER_NAME).update(unreachable_since=timezone.now())
    # none answers: the job waits for one, as on a single cluster down for a while
    assert {c.name for c in clusters_for("any")} == {settings.CLUSTER_NAME, "h200-east"}


def test_a_jobs_calls_go_to_its_own_cluster() -> None:
    second = second_cluster()
    job = JobFactory(cluster=second)

    @in_job_cluster
    def where(*, job_id: int) -> str:
        return kube.current_cluster().name

    assert where(job_id=job.pk) == "h200-east"
    assert where(job_id=JobFactory().pk) == settings.CLUSTER_NAME  # a row from before
    assert kube.current_cluster().name == settings.CLUSTER_NAME  # bound for the call only


def _running(cluster: Cluster, fakes: FakeClusters) -> Job:
    now = timezone.now() - timedelta(seconds=settings.LOST_GRACE_SECONDS + 60)
    job = JobFactory(
        team=TeamFactory(),
        cluster=cluster,
        state=JobState.RUNNING,
        admitted_at=now,
        applied_at=now,
        started_at=now,
    )
    job.object_name = f"train-{job.pk}"
    job.save(update_fields=["object_name"])
    fakes[cluster.name].running_training_job(job)
    return job


def test_each_cluster_is_tracked_alone_and_one_down_changes_no_job(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Given a running job on each of two clusters, each job's objects in its own cluster
    fakes = FakeClusters()
    monkeypatch.setattr(kube, "list_all", fakes.list_all)
    first, second = cluster_first(), second_cluster()
    here, there = _running(first, fakes), _running(second, fakes)

    # When the reconcile runs, then neither is lost (neither's objects are in the other)
    report = cluster_reconcile()
    assert report.cluster_error == "" and report.lost == []
    assert set(Job.objects.values_list("state", flat=True)) == {JobState.RUNNING}

    # When the second cluster stops answering
    fakes.down.add(second.name)
    report = cluster_reconcile()

    # Then its job keeps its state, the cluster says since when, and the first is tracked
    assert report.cluster_error.startswith("h200-east: connection refused")
    there.refresh_from_db()
    assert there.state == JobState.RUNNING
    second.refresh_from_db()
    assert second.unreachable_since is not None and "connection refused" in second.last_error

    # And when it answers again without the job's objects, that job alone is lost
    fakes.down.clear()
    fakes[second.name].objects.clear()
    report = cluster_reconcile()
    assert report.lost == [there.pk]
    here.refresh_from_db()
    assert here.state == JobState.RUNNING
    second.refresh_from_db()
    assert second.unreachable_since is None and second.last_error == ""


def test_the_first_cluster_where_the_job_fits_now_ends_the_asking() -> None:
    second_cluster("a100-south")
    second_cluster("h200-east")
    asked: list[str] = []

    def preview(cluster: Cluster) -> FitPreview:
        assert kube.current_cluster().name == cluster.name  # the adapter bound to it
        asked.append(cluster.name)
        return FitPreview("fits", "Fits now.", quota="nominal")

    placement = job_place(clusters_for("any"), preview)

    # nothing can beat the first (by name) that fits now: the others are not asked
    assert asked == ["a100-south"]
    assert placement.cluster.name == "a100-south"
    assert placement.reason == "Placed on a100-south (a100-south: fits now)."


def test_each_cluster_keeps_its_own_recent_snapshot(
    monkeypatch: pytest.MonkeyPatch, settings: Any
) -> None:
    from jobs.selectors import fit

    listed: list[str] = []

    def snapshot() -> Any:
        listed.append(kube.current_cluster().name)
        return fit.ClusterSnapshot([], [])

    monkeypatch.setattr(fit, "cluster_snapshot", snapshot)
    monkeypatch.setattr(fit, "_recent", {})
    settings.FIT_SNAPSHOT_TTL_SECONDS = 60
    first, second = cluster_first(), second_cluster()

    # A placement asks each cluster in turn, again and again within the TTL
    for _ in range(3):
        for cluster in (first, second):
            with kube.on_cluster(cluster.access_to()):
                fit.recent_cluster_snapshot()

    # Each cluster was listed once (one shared entry listed at every turn)
    assert listed == [first.name, second.name]


def test_a_team_runs_only_where_it_has_quota_and_is_told_where_that_is(alice: User) -> None:
    # Given vision with quota on the first cluster and none on h200-east
    second_cluster()
    client = api_client_for(alice)
    # When alice names h200-east, Then it is refused, naming where and why; nothing stored
    response = client.post(
        "/api/v1/jobs/", training_spec(name="far", cluster="h200-east"), format="json"
    )
    assert response.status_code == 400, response.content
    errors = response.json()["errors"]
    assert "On h200-east: Team vision has no quota for GPUs" in errors["gpu.count"][0]
    assert not Job.objects.filter(name="far").exists()
    # and ``any`` places it where the quota is, without asking the other
    response = client.post("/api/v1/jobs/", training_spec(name="near"), format="json")
    assert response.status_code == 201, response.content
    assert response.json()["cluster"] == settings.CLUSTER_NAME


def test_admission_counts_a_teams_jobs_against_its_quota_on_their_own_cluster(
    alice: User, settings: Any
) -> None:
    # Given vision with 16 GPUs on the first cluster and 8 on h200-east, and 16 in use on
    # the first
    second = second_cluster()
    gpus_for("vision", second, limit=8)
    settings.QUEUEING = "portal"
    here = [
        job_submit(
            user=alice,
            data=training_spec(name=f"here{i}", gpu={"count": 8}, cluster=settings.CLUSTER_NAME),
        )
        for i in range(3)
    ]
    job_submit(user=alice, data=training_spec(name="far", gpu={"count": 8}, cluster="h200-east"))
    # When admission runs
    admission_run(team_id=here[0].team_id)
    # Then the first cluster admits two of its three (16 of 16), and h200-east its own
    admitted = {j.name for j in Job.objects.filter(admitted_at__isnull=False)}
    assert admitted == {"here0", "here1", "far"}
    waiting = Job.objects.get(name="here2")
    assert waiting.reason == "QuotaExceeded" and "16 of 16" in waiting.message, waiting.message


def test_a_teams_quota_use_is_read_per_cluster(alice: User) -> None:
    # Given vision's 16 GPUs on the first cluster and 8 on h200-east, 2 in use on each
    east = second_cluster()
    gpus_for("vision", east, limit=8)
    vision = Team.objects.get(slug="vision")
    for cluster in (cluster_first(), east):
        JobFactory(
            team=vision,
            state=JobState.RUNNING,
            admitted_at=timezone.now(),
            cluster=cluster,
            demand={GPU: 2},
        )

    # Then each cluster's quota is shown with that cluster's use alone
    def gpus(cluster: Cluster | None) -> tuple[int, int]:
        use = next(q for q in quota_usage(team=vision, cluster=cluster) if q.resource == GPU)
        return use.limit, use.used

    assert gpus(None) == (16, 2)
    assert gpus(east) == (8, 2)


def test_the_teams_api_page_and_cli_list_each_clusters_quota_with_its_use(alice: User) -> None:
    # Given vision's 16 GPUs on the first cluster and 8 on h200-east, 2 in use there
    east = second_cluster()
    gpus_for("vision", east, limit=8)
    vision = Team.objects.get(slug="vision")
    JobFactory(
        team=vision, state=JobState.RUNNING, admitted_at=timezone.now(), cluster=east,
        demand={GPU: 2},
    )  # fmt: skip
    # When alice lists her teams
    teams = api_client_for(alice).get("/api/v1/teams/").json()
    quotas = {(q["cluster"], q["resource"]): q for q in teams[0]["quotas"]}
    # Then each cluster's quota is there with its own use
    assert quotas[(settings.CLUSTER_NAME, GPU)]["nominal"] == 16
    assert quotas[(settings.CLUSTER_NAME, GPU)]["used"] == 0
    assert quotas[("h200-east", GPU)]["nominal"] == 8
    assert quotas[("h200-east", GPU)]["used"] == 2
    # ...and the teams page has a cluster column
    client = Client()
    client.force_login(alice)
    page = client.get("/teams/").content.decode()
    assert "<th>Cluster</th>" in page and "<td><code>h200-east</code></td>" in page
    # ...and says when its jobs spill over to another cluster, once the team has a time
    assert 'data-testid="spill-over"' not in page
    Team.objects.filter(pk=vision.pk).update(spill_over_minutes=45)
    page = client.get("/teams/").content.decode()
    assert "still waiting for quota 45 min after it was placed moves" in page


def test_with_every_cluster_full_any_waits_where_fewer_of_the_teams_jobs_are_ahead() -> None:
    first, second = cluster_first(), second_cluster()
    answers = {
        first.name: FitPreview("waits-for-quota", "Waits.", quota="waits", ahead=3),
        second.name: FitPreview("waits-for-quota", "Waits.", quota="waits", ahead=1),
    }

    placement = job_place(clusters_for("any"), lambda cluster: answers[cluster.name])

    assert placement.cluster == second
    assert placement.reason == (
        f"Placed on h200-east ({first.name}: waits for the team's quota (3 jobs ahead); "
        "h200-east: waits for the team's quota (1 job ahead))."
    )


def test_the_quota_preview_counts_the_jobs_ahead_on_its_own_cluster(alice: User) -> None:
    # Given vision's quota in use on both clusters, and two jobs queued on the first
    east = second_cluster()
    gpus_for("vision", east, limit=8)
    vision = Team.objects.get(slug="vision")
    for cluster, gpus in ((cluster_first(), 16), (east, 8)):
        JobFactory(
            team=vision, state=JobState.RUNNING, admitted_at=timezone.now(), cluster=cluster,
            demand={GPU: gpus},
        )  # fmt: skip
    for _ in range(2):
        JobFactory(team=vision, state=JobState.QUEUED, cluster=cluster_first(), demand={GPU: 1})

    def ahead(cluster: Cluster) -> int:
        verdict = admission_preview(
            team_id=vision.pk, kind="training", priority=0, demand={GPU: 1}, cluster=cluster
        )
        assert verdict.kind == "waits"
        return verdict.ahead

    assert (ahead(cluster_first()), ahead(east)) == (2, 0)
