"""Management commands an operator runs: `seed_demo` and `create_api_token`."""

from __future__ import annotations

import io
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.core.management import call_command
from django.core.management.base import CommandError
from django.test import override_settings
from rest_framework.test import APIClient

from cluster.models import GpuProduct, MigProfile
from portal.models import ApiToken
from teams.models import Cohort, GpuQuota, Membership, Team

pytestmark = pytest.mark.django_db


def counts() -> dict[str, int]:
    return {
        "teams": Team.objects.count(),
        "users": User.objects.count(),
        "memberships": Membership.objects.count(),
        "quotas": GpuQuota.objects.count(),
        "products": GpuProduct.objects.count(),
        "mig_profiles": MigProfile.objects.count(),
    }


def run(*args: str) -> str:
    out = io.StringIO()
    call_command(*args, stdout=out)
    return out.getvalue()


def test_seed_demo_is_idempotent() -> None:
    # Given a seeded database
    run("seed_demo")
    first = counts()
    # When seed_demo runs again
    run("seed_demo")
    # Then nothing is duplicated and the demo passwords still work
    assert counts() == first
    assert first == {
        "teams": 4,
        "users": 5,
        "memberships": 4,
        "quotas": 6,
        "products": 3,
        "mig_profiles": 3,
    }
    for username in ("alice", "bob", "carol", "dave", "admin"):
        assert User.objects.get(username=username).check_password("demo"), username


def test_seed_demo_restores_changed_quotas_and_roles() -> None:
    # Given a seeded database where someone changed a quota and a role
    run("seed_demo")
    GpuQuota.objects.filter(team__slug="vision", resource="nvidia.com/gpu").update(limit=2)
    Membership.objects.filter(user__username="bob").update(role=Membership.Role.MEMBER)
    # When seed_demo runs again
    run("seed_demo")
    # Then the demo values are back
    assert GpuQuota.objects.get(team__slug="vision", resource="nvidia.com/gpu").limit == 16
    assert Membership.objects.get(user__username="bob").role == Membership.Role.LEAD


def test_seeded_quotas_are_exactly_the_demo_ones() -> None:
    # Given nothing
    # When seed_demo runs
    run("seed_demo")
    # Then every team has exactly the documented quotas
    quotas = {(q.team.slug, q.resource, q.limit) for q in GpuQuota.objects.select_related("team")}
    assert quotas == {
        ("vision", "nvidia.com/gpu", 16),
        ("vision", "nvidia.com/mig-1g.10gb", 8),
        ("vision", "nvidia.com/gpu.shared", 8),
        ("nlp", "NVIDIA-A100-SXM4-80GB", 8),
        ("speech", "nvidia.com/gpu.shared", 4),
        ("robotics", "nvidia.com/gpu", 8),
    }
    # and vision and robotics lend each other their unused quota, with no limits
    research = Cohort.objects.get(slug="research")
    assert sorted(research.teams.values_list("slug", flat=True)) == ["robotics", "vision"]
    assert not (
        GpuQuota.objects.filter(team__cohort=research)
        .exclude(borrowing_limit=None, lending_limit=None)
        .exists()
    )


def test_seed_demo_refuses_production_settings() -> None:
    # Given production settings
    with override_settings(PRODUCTION=True), pytest.raises(CommandError, match="production"):
        # When seed_demo runs
        run("seed_demo")
    # Then it refused before creating anything (no demo password in production)
    assert not User.objects.filter(username="alice").exists()
    assert not Team.objects.exists()


def test_create_api_token_prints_a_working_token(demo: dict[str, Any]) -> None:
    # Given alice of team vision
    # When an operator creates a token for her
    output = run("create_api_token", "alice")
    token = output.strip().splitlines()[-1].strip()
    # Then the last line is a token that authenticates her on the API
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
    response = client.get("/api/v1/teams/")
    assert response.status_code == 200
    assert [team["slug"] for team in response.json()] == ["vision"]
    # And only a hash of it is stored
    stored = ApiToken.objects.get(user__username="alice")
    assert token not in (stored.digest, stored.prefix, stored.description)
    assert not ApiToken.objects.filter(digest=token).exists()


def test_a_wrong_token_is_refused(demo: dict[str, Any]) -> None:
    # Given a token for alice
    token = run("create_api_token", "alice").strip().splitlines()[-1]
    # When a client sends a different one
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {token}x")
    # Then the API refuses it
    assert client.get("/api/v1/teams/").status_code == 401


def test_create_api_token_for_unknown_user_fails(demo: dict[str, Any]) -> None:
    # Given no user named mallory
    # When an operator asks for a token for mallory
    with pytest.raises(CommandError, match="mallory"):
        run("create_api_token", "mallory")
    # Then no token was created
    assert not ApiToken.objects.exists()
