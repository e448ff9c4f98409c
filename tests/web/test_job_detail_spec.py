"""The job page shows the stored spec as readable YAML in the contract's field order."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User
from django.test import Client

from jobs.services.submit import job_submit
from tests.conftest import training_spec

pytestmark = pytest.mark.django_db


def test_job_page_shows_the_spec_as_yaml_in_contract_order(alice: User) -> None:
    job = job_submit(user=alice, data=training_spec(name="ordered", gpu={"count": 2}))
    client = Client()
    client.force_login(alice)

    html = client.get(f"/jobs/{job.pk}/").content.decode()

    spec = html.split('data-testid="spec-yaml">', 1)[1].split("</pre>", 1)[0]
    lines = spec.splitlines()
    assert lines[:3] == ["team: vision", "name: ordered", "kind: training"]
    assert "gpu:" in lines and "  count: 2" in lines
    assert "{&#x27;" not in spec  # not a Python dict repr
