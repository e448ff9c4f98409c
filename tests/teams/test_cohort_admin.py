"""Cohorts, borrowing and lending limits and weights in the admin console: what it shows per
cohort and team, and an audit row (who, old → new) for every change."""

from __future__ import annotations

import re
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.utils import timezone

from jobs.models import JobState
from teams.models import AuditLog, Cohort, GpuQuota, Team
from tests.factories import JobFactory
from tests.teams.test_admin import form_fields

pytestmark = pytest.mark.django_db


@pytest.fixture
def admin(research: dict[str, Any], client: Client) -> User:
    user: User = research["users"]["admin"]
    client.force_login(user)
    return user


def test_limits_are_set_on_the_quota_and_audited_old_to_new(admin: User, client: Client) -> None:
    quota = GpuQuota.objects.get(team__slug="vision", resource="nvidia.com/gpu")
    url = f"/admin/teams/gpuquota/{quota.pk}/change/"
    data = form_fields(client.get(url).content.decode(), "gpuquota_form")
    data.update(borrowing_limit="4", lending_limit="10", _save="Save")

    response = client.post(url, data)

    assert response.status_code == 302, response.content.decode()[:2000]
    quota.refresh_from_db()
    assert (quota.limit, quota.borrowing_limit, quota.lending_limit) == (16, 4, 10)
    entry = AuditLog.objects.get(action="quota.update")
    assert entry.actor == admin
    assert entry.changes == {
        "team": "vision",
        "resource": "nvidia.com/gpu",
        "old": 16,
        "new": 16,
        "borrowing_limit": {"old": None, "new": 4},
        "lending_limit": {"old": None, "new": 10},
    }


def test_a_lending_limit_above_nominal_is_refused_naming_the_field(
    admin: User, client: Client
) -> None:
    quota = GpuQuota.objects.get(team__slug="robotics", resource="nvidia.com/gpu")
    url = f"/admin/teams/gpuquota/{quota.pk}/change/"
    data = form_fields(client.get(url).content.decode(), "gpuquota_form")
    data.update(lending_limit="9", _save="Save")

    response = client.post(url, data)

    assert response.status_code == 200  # the form again, with the error
    assert "The lending limit cannot be more than the nominal quota" in response.content.decode()
    quota.refresh_from_db()
    assert quota.lending_limit is None
    assert not AuditLog.objects.filter(action="quota.update").exists()


def test_moving_a_team_between_cohorts_and_changing_its_weight_is_audited(
    admin: User, client: Client
) -> None:
    lab = Cohort.objects.create(slug="lab", name="Lab")
    nlp = Team.objects.get(slug="nlp")
    url = f"/admin/teams/team/{nlp.pk}/change/"
    data = form_fields(client.get(url).content.decode(), "team_form")
    data.update(cohort=str(lab.pk), weight="2.5", inference_may_borrow="on", _save="Save")

    response = client.post(url, data)

    assert response.status_code == 302, response.content.decode()[:2000]
    nlp.refresh_from_db()
    assert (nlp.cohort, str(nlp.weight), nlp.inference_may_borrow) == (lab, "2.50", True)
    entry = AuditLog.objects.get(action="team.update", target="nlp")
    assert entry.actor == admin
    assert entry.changes == {
        "cohort": {"old": None, "new": "lab"},
        "weight": {"old": "1.00", "new": "2.50"},
        "inference_may_borrow": {"old": False, "new": True},
    }


def test_cohorts_show_their_teams_and_totals_and_are_audited(
    admin: User, client: Client, research: dict[str, Any]
) -> None:
    # Given vision running 20 GPUs: 4 of them borrowed from robotics
    JobFactory(
        team=research["teams"]["vision"],
        owner=research["users"]["alice"],
        state=JobState.RUNNING,
        gpu_count=20,
        demand={"nvidia.com/gpu": 20},
        admitted_at=timezone.now(),
    )
    # Then the cohort list says so: nominal / in use / borrowed / unused
    page = client.get("/admin/teams/cohort/").content.decode()
    assert "robotics, vision" in page
    assert "nvidia.com/gpu: 24 / 20 / 4 / 4" in page
    # and each team's quota row shows what it borrows and lends
    team_page = client.get(f"/admin/teams/team/{research['teams']['robotics'].pk}/change/")
    html = re.sub(r"\s+", "", team_page.content.decode())
    assert '<tdclass="field-borrowed"><p>0</p></td><tdclass="field-lent"><p>4</p></td>' in html

    # When the admin creates a cohort
    data = form_fields(client.get("/admin/teams/cohort/add/").content.decode(), "cohort_form")
    data.update(name="Speech and NLP", slug="speech-nlp", _save="Save")
    response = client.post("/admin/teams/cohort/add/", data)
    # Then it is audited
    assert response.status_code == 302, response.content.decode()[:2000]
    assert AuditLog.objects.filter(action="cohort.create", actor=admin, target="speech-nlp")
