"""team_quotas_for_user: the team as teams_for_user scopes it, with its quotas."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth.models import AnonymousUser, User
from django.db import connection
from django.test.utils import CaptureQueriesContext

from teams.models import GpuQuota, Team
from teams.selectors import team_quotas_for_user, teams_for_user
from tests.factories import TeamFactory

pytestmark = pytest.mark.django_db


def _limits(team: Team) -> dict[str, int]:
    return dict(GpuQuota.objects.filter(team=team).values_list("resource", "limit"))


def test_a_members_team_comes_whole_with_its_quotas_in_one_statement(alice: User) -> None:
    # given alice, a member of vision, which has quotas
    expected = teams_for_user(user=alice).get(slug="vision")
    assert _limits(expected)

    # when her team is read by slug
    with CaptureQueriesContext(connection) as captured:
        found = team_quotas_for_user(user=alice, slug="vision")

    # then it is the same row, every field loaded, with every quota, in one statement
    assert len(captured.captured_queries) == 1
    assert found is not None
    assert found.team.pk == expected.pk
    assert {f.attname: getattr(found.team, f.attname) for f in Team._meta.concrete_fields} == {
        f.attname: getattr(expected, f.attname) for f in Team._meta.concrete_fields
    }
    assert found.limits == _limits(expected)


def test_a_team_without_quotas_has_no_limits(alice: User) -> None:
    team = TeamFactory()
    team.memberships.create(user=alice)

    found = team_quotas_for_user(user=alice, slug=team.slug)

    assert found is not None and found.team.pk == team.pk
    assert found.limits == {}


@pytest.mark.parametrize("slug", ["nlp", "no-such-team"])
def test_another_teams_or_an_unknown_slug_is_none(alice: User, slug: str) -> None:
    assert team_quotas_for_user(user=alice, slug=slug) is None


def test_nobody_signed_in_has_no_team(demo: dict[str, Any]) -> None:
    assert team_quotas_for_user(user=AnonymousUser(), slug="vision") is None


def test_a_platform_admin_reads_every_team(admin_user: User) -> None:
    # given a platform admin, a member of no team
    assert admin_user.is_superuser

    for team in Team.objects.all():
        found = team_quotas_for_user(user=admin_user, slug=team.slug)

        assert found is not None and found.team.pk == team.pk
        assert found.limits == _limits(team)
