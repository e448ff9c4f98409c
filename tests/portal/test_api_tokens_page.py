"""A user creates, sees and revokes their own API tokens in the browser (for the CLI)."""

from __future__ import annotations

import re

import pytest
from django.contrib.auth.models import User
from django.test import Client

from portal.models import ApiToken
from portal.services import api_token_authenticate

pytestmark = pytest.mark.django_db


def test_a_token_is_shown_once_works_and_can_be_revoked(alice: User, bob: User) -> None:
    client = Client()
    client.force_login(alice)

    page = client.post("/settings/tokens/", {"description": "laptop CLI"}).content.decode()

    found = re.search(r'aria-label="New token">(gpp_[\w-]+)</pre>', page)
    assert found is not None
    secret = found.group(1)
    token = api_token_authenticate(secret=secret)
    assert token is not None and token.user == alice and token.description == "laptop CLI"
    listing = client.get("/settings/tokens/").content.decode()
    assert secret not in listing and f"{token.prefix}…" in listing  # shown once only
    # Another user cannot revoke it; its owner can.
    other = Client()
    other.force_login(bob)
    other.post("/settings/tokens/", {"revoke": token.pk})
    assert api_token_authenticate(secret=secret) is not None
    client.post("/settings/tokens/", {"revoke": token.pk})
    assert api_token_authenticate(secret=secret) is None
    assert ApiToken.objects.get(pk=token.pk).revoked_at is not None
