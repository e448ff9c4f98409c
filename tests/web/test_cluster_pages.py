"""What the pages say about several clusters: the cluster page lists them, an unreachable one
with since when and why; a job's page names its cluster and says when it is unreachable."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.utils import timezone

from cluster.models import Cluster
from jobs.services.submit import job_submit
from teams.models import Team
from teams.services import quota_set
from tests.conftest import training_spec

pytestmark = pytest.mark.django_db


def _client(user: User) -> Client:
    client = Client()
    client.force_login(user)
    return client


def test_the_cluster_page_lists_the_clusters_and_one_that_does_not_answer(alice: User) -> None:
    Cluster.objects.create(
        name="h200-east",
        kubeconfig_path="/k/h200-east",
        region="us-east",
        unreachable_since=timezone.now(),
        last_error="connection refused",
    )

    page = _client(alice).get("/monitoring/").content.decode()

    assert 'data-testid="clusters"' in page
    assert "<code>h200-east</code>" in page and "us-east" in page
    assert "unreachable since" in page and "connection refused" in page


def test_a_jobs_page_names_its_cluster_and_says_when_it_does_not_answer(alice: User) -> None:
    cluster = Cluster.objects.create(name="h200-east", kubeconfig_path="/k/h200-east")
    vision = Team.objects.get(slug="vision")
    quota_set(actor=None, team=vision, resource="nvidia.com/gpu", limit=8, cluster=cluster)
    job = job_submit(user=alice, data=training_spec(name="far", cluster="h200-east"))

    page = _client(alice).get(f"/jobs/{job.pk}/").content.decode()
    assert "h200-east" in page and "cluster unreachable" not in page

    Cluster.objects.filter(pk=cluster.pk).update(unreachable_since=timezone.now())
    page = _client(alice).get(f"/jobs/{job.pk}/").content.decode()
    assert "cluster unreachable since" in page


def test_the_forms_offer_each_cluster_taking_work_and_say_which_does_not_answer(
    alice: User,
) -> None:
    Cluster.objects.create(name="a100-west", kubeconfig_path="/k/a100-west")
    Cluster.objects.create(
        name="h200-east",
        kubeconfig_path="/k/h200-east",
        unreachable_since=timezone.now().replace(hour=9, minute=30),
    )
    Cluster.objects.create(name="old", kubeconfig_path="/k/old", state=Cluster.State.DRAINING)

    for form in ("/jobs/new/", "/workspaces/"):
        page = _client(alice).get(form).content.decode()
        assert '<option value="a100-west">a100-west</option>' in page, form
        assert "h200-east (not answering since " in page and " 09:30 UTC)</option>" in page
        assert 'value="old"' not in page, form
