"""GET /api/v1/cluster/launchers/ and the launcher check when the cluster cannot be asked:
a plain 503 naming the trouble, and a submission with an operator's launcher refused on
its field, nothing stored (the cluster-side behaviour is in
tests/integration/test_launchers.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rest_framework.test import APIClient

from cluster import kube
from cluster.launchers import launchers_forget
from jobs.models import Job
from tests.conftest import training_spec


def unreachable(settings: Any, tmp_path: Path) -> None:
    settings.KUBECONFIG = str(tmp_path / "missing-kubeconfig")
    settings.KUBE_IN_CLUSTER = False
    kube.reset_client()
    launchers_forget()


def test_launchers_without_a_cluster_are_a_plain_503(
    alice_api: APIClient, demo: dict[str, Any], settings: Any, tmp_path: Path
) -> None:
    # Given no reachable cluster
    unreachable(settings, tmp_path)
    # When alice asks which launchers there are, Then she is told plainly why not
    response = alice_api.get("/api/v1/cluster/launchers/")
    assert response.status_code == 503
    assert response.json()["detail"].startswith("cluster unreachable: ")
    kube.reset_client()


def test_an_operator_launcher_without_a_cluster_is_refused_on_its_field(
    alice_api: APIClient, demo: dict[str, Any], settings: Any, tmp_path: Path
) -> None:
    unreachable(settings, tmp_path)
    response = alice_api.post(
        "/api/v1/jobs/", training_spec(name="ddp", launcher="pytorchjob"), format="json"
    )
    assert response.status_code == 400
    assert (
        "could not be asked which launchers it serves" in (response.json()["errors"]["launcher"][0])
    )
    assert not Job.objects.filter(name="ddp").exists()
    kube.reset_client()
