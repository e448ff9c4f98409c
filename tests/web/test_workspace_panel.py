"""A workspace's job page loads its box from the workspaces app: Open for its owner while it
runs, Stop for those who may manage it (a lead, who opens it only where the team allows), and
a 404 for other teams and for jobs that are not workspaces."""

from __future__ import annotations

from typing import Any

from django.contrib.auth.models import User
from django.test import Client

from jobs.models import Job, JobState
from tests.factories import JobFactory


def _page(user: User, path: str) -> Any:
    client = Client()
    client.force_login(user)
    return client.get(path)


def test_the_job_page_of_a_workspace_loads_its_box(alice: User, demo: dict[str, Any]) -> None:
    job = JobFactory(
        team=demo["teams"]["vision"], owner=alice, kind=Job.Kind.WORKSPACE, state=JobState.RUNNING
    )
    page = _page(alice, f"/jobs/{job.pk}/").content.decode()
    assert f'hx-get="/workspaces/actions/{job.pk}/panel/"' in page


def test_its_owner_may_open_and_stop_it_its_lead_only_stop_it(
    alice: User, demo: dict[str, Any]
) -> None:
    # Given alice's running workspace in vision, where leads may not open members' workspaces
    vision = demo["teams"]["vision"]
    vision.workspace_leads_may_open = False
    vision.save()
    job = JobFactory(team=vision, owner=alice, kind=Job.Kind.WORKSPACE, state=JobState.RUNNING)
    panel = f"/workspaces/actions/{job.pk}/panel/"
    # Then alice sees Open (at the proxy's path) and Stop
    mine = _page(alice, panel).content.decode()
    assert f'href="/workspaces/{job.pk}/"' in mine and 'data-testid="stop"' in mine
    # and bob, vision's lead, may stop it but not open it
    lead = _page(demo["users"]["bob"], panel).content.decode()
    assert 'data-testid="open"' not in lead and 'data-testid="stop"' in lead


def test_other_teams_and_other_kinds_get_404(alice: User, demo: dict[str, Any]) -> None:
    job = JobFactory(team=demo["teams"]["vision"], owner=alice, kind=Job.Kind.WORKSPACE)
    training = JobFactory(team=demo["teams"]["vision"], owner=alice)
    assert _page(demo["users"]["carol"], f"/workspaces/actions/{job.pk}/panel/").status_code == 404
    assert _page(alice, f"/workspaces/actions/{training.pk}/panel/").status_code == 404
