"""Spill-over: a job for any cluster that has waited for quota past its team's spill-over
time moves once to a cluster where it would start now, its timeline saying why; it stays
when it is not due, names its cluster, or would wait on the other cluster too. (The
clusters' answers are the fit preview's, given here per cluster.)"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.conf import settings
from django.utils import timezone

from cluster import kube
from cluster.models import Cluster
from cluster.services import cluster_first
from jobs.models import Job, JobState
from jobs.selectors.fit import FitPreview
from jobs.services import spill_over
from jobs.services.spill_over import jobs_spill_over
from teams.models import Team
from tests.factories import JobFactory, TeamFactory

pytestmark = pytest.mark.django_db

EAST = "h200-east"
FITS = FitPreview("fits", "Fits now on h200-0.", ["h200-0"], quota="nominal")
WAITS = FitPreview("waits-for-quota", "Waits for quota.", quota="waits")


@pytest.fixture
def answers(monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """What the fit preview says on each cluster (it is asked with the adapter bound to
    that cluster), and the teams whose admission was queued."""
    said: dict[str, Any] = {"admission": []}

    def preview(*, cluster: Cluster, **_: Any) -> FitPreview:
        assert kube.current_cluster().name == cluster.name
        found: FitPreview = said[cluster.name]
        return found

    monkeypatch.setattr(spill_over, "job_fit_preview", preview)
    monkeypatch.setattr(
        spill_over, "admission_enqueue", lambda *, team_id: said["admission"].append(team_id)
    )
    return said


def waiting_job(team: Team, *, minutes: int, cluster: str = "any") -> Job:
    job: Job = JobFactory(team=team, state=JobState.QUEUED, cluster=cluster_first())
    Job.objects.filter(pk=job.pk).update(
        created_at=timezone.now() - timedelta(minutes=minutes),
        spec={**job.spec, "cluster": cluster},
    )
    return Job.objects.get(pk=job.pk)


@pytest.fixture
def team() -> Team:
    Cluster.objects.create(name=EAST, kubeconfig_path="/k/h200-east")
    found: Team = TeamFactory(spill_over_minutes=30)
    return found


def test_a_job_past_its_spill_over_time_moves_once_to_where_it_starts_now(
    answers: dict[str, Any], team: Team
) -> None:
    # Given a job for any cluster waiting 31 minutes on the first, where its team's
    # spill-over time is 30, and h200-east where it would start now
    job = waiting_job(team, minutes=31)
    answers[EAST] = FITS
    # When the spill-over runs
    assert jobs_spill_over() == [job.pk]
    # Then it is on h200-east, its timeline says from where, to where and why, and its
    # team's admission runs (on the new cluster)
    moved = Job.objects.get(pk=job.pk)
    assert moved.cluster is not None and moved.cluster.name == EAST
    assert moved.state == JobState.QUEUED and moved.reason == "Moved"
    assert moved.message == (
        f"Moved from {settings.CLUSTER_NAME} to {EAST}: it waited 31 min for quota on "
        f"{settings.CLUSTER_NAME}, past team {team.slug}'s spill-over time of 30 min "
        f"({EAST}: fits now)."
    )
    assert list(moved.events.values_list("reason", flat=True)) == ["Moved"]
    assert answers["admission"] == [team.pk]
    # ...and once: the first cluster freeing later does not move it back
    answers[settings.CLUSTER_NAME] = FITS
    assert jobs_spill_over() == []
    assert Job.objects.get(pk=job.pk).cluster == moved.cluster


def test_a_job_stays_before_its_time_when_it_names_its_cluster_or_would_wait_there_too(
    answers: dict[str, Any], team: Team
) -> None:
    young = waiting_job(team, minutes=10)
    named = waiting_job(team, minutes=90, cluster=settings.CLUSTER_NAME)
    answers[EAST] = FITS
    assert jobs_spill_over() == []

    old = waiting_job(team, minutes=90)
    answers[EAST] = WAITS
    assert jobs_spill_over() == []

    for job in (young, named, old):
        assert Job.objects.get(pk=job.pk).cluster == cluster_first()
    assert answers["admission"] == []


def test_a_team_without_a_spill_over_time_keeps_its_jobs_where_they_are(
    answers: dict[str, Any], team: Team
) -> None:
    Team.objects.filter(pk=team.pk).update(spill_over_minutes=None)
    job = waiting_job(team, minutes=600)
    answers[EAST] = FITS
    assert jobs_spill_over() == []
    assert Job.objects.get(pk=job.pk).cluster == cluster_first()
