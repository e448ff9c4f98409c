"""How the portal's tasks treat what the API server answers: an outage is retried, a
refusal (bad credentials included) is reported once, as what it is."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.utils import timezone

from cluster import kube
from jobs.models import Job, JobState
from jobs.services.apply import job_apply
from jobs.services.submit import job_submit
from teams.tasks import team_sync_task, teams_sync_task
from tests.conftest import training_spec
from tests.factories import TeamFactory
from tests.sandbox_process import SandboxProcess

pytestmark = pytest.mark.django_db


@pytest.fixture
def refused_credentials(cluster: SandboxProcess, settings: Any, tmp_path: Path) -> Iterator[str]:
    """A kubeconfig for the sandbox whose token the API server does not know."""
    bad = tmp_path / "kubeconfig"
    bad.write_text(cluster.kubeconfig.read_text().replace(cluster.token, "not-the-token"))
    settings.KUBECONFIG = str(bad)
    kube.reset_client()
    yield str(bad)
    settings.KUBECONFIG = str(cluster.kubeconfig)  # the cluster fixture cleans up with it
    kube.reset_client()


def test_credentials_the_api_server_refuses_are_a_configuration_error_not_an_outage(
    refused_credentials: str,
) -> None:
    # Given a team, and credentials the API server answers 401
    team = TeamFactory()

    # When its sync task runs
    result = team_sync_task.apply(args=[team.pk])

    # Then it fails at once, not retried, with an error that says what to fix
    assert result.failed()
    assert isinstance(result.result, kube.ClusterCredentialsRefused)
    assert not isinstance(result.result, kube.TemporaryClusterError)
    assert result.result.status == 401
    assert "check the kubeconfig credentials" in result.result.message


def test_the_periodic_sync_reports_each_refused_team_and_goes_on(
    refused_credentials: str,
) -> None:
    # Given two teams and refused credentials; When the periodic sync runs
    teams = TeamFactory.create_batch(2)
    results = teams_sync_task.apply().get()

    # Then every team is reported with the refusal, none is retried in the pass
    assert {team.pk for team in teams} <= set(results)
    assert all("Unauthorized" in results[team.pk] for team in teams)


def test_refused_credentials_never_fail_a_users_job(
    refused_credentials: str, demo: dict[str, Any]
) -> None:
    # Given an admitted job of alice's, and credentials the API server refuses
    job = job_submit(user=demo["users"]["alice"], data=training_spec(name="patient"))
    Job.objects.filter(pk=job.pk).update(admitted_at=timezone.now())

    # When its apply runs, Then the operator's error is raised, not the job's
    with pytest.raises(kube.ClusterCredentialsRefused):
        job_apply(job_id=job.pk)

    # And the job waits, admitted and queued, for the credentials to be fixed
    job.refresh_from_db()
    assert (job.state, job.applied_at) == (JobState.QUEUED, None)
    assert job.admitted_at is not None
    assert not job.events.filter(reason="ApplyFailed").exists()
