"""The portal's clusters: the first one made from its settings, and the Kubernetes adapter
reaching whichever cluster a block of work names (the process's real local cluster, and
clusters that cannot be reached)."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
import yaml
from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction

from cluster import kube
from cluster.models import Cluster
from cluster.services import cluster_first
from tests.receivers import free_port
from tests.sandbox_process import SandboxProcess

pytestmark = pytest.mark.django_db


def test_an_installation_keeps_its_one_cluster_as_the_first_of_its_clusters() -> None:
    # Given the portal's settings, Then they are its first cluster, reached as before (made
    # by a migration; made again should it be gone, as a flushed test database loses it)
    Cluster.objects.all().delete()
    first = cluster_first()
    assert (first.name, first.access, first.state) == (settings.CLUSTER_NAME, "settings", "enabled")
    assert cluster_first().pk == first.pk and Cluster.objects.count() == 1
    assert first.access_to().resolved() == (
        settings.KUBECONFIG,
        settings.KUBE_CONTEXT,
        bool(settings.KUBE_IN_CLUSTER),
    )


def test_a_cluster_needs_a_dns_name_and_a_kubeconfig_path_to_be_reached_by_one() -> None:
    bad = Cluster(name="A100 West", access="kubeconfig", kubeconfig_path="/etc/k/a100")
    with pytest.raises(ValidationError) as refused:
        bad.full_clean()
    assert "name" in refused.value.message_dict
    assert "e.g. a100-west" in refused.value.message_dict["name"][0]
    with pytest.raises(IntegrityError), transaction.atomic():
        Cluster.objects.create(name="a100-west", access="kubeconfig")


def kubeconfig_to(tmp_path: Path, server: str) -> Path:
    path = tmp_path / "kubeconfig"
    path.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "c", "cluster": {"server": server}}],
                "users": [{"name": "u", "user": {"token": "t"}}],
                "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}],
                "current-context": "c",
            }
        )
    )
    return path


def test_work_reaches_the_cluster_its_block_names_and_no_other(
    cluster: SandboxProcess, tmp_path: Path
) -> None:
    # Given the first cluster (the local one) and h200-east, whose API server is down
    down = Cluster.objects.create(
        name="h200-east",
        access="kubeconfig",
        kubeconfig_path=str(kubeconfig_to(tmp_path, f"http://127.0.0.1:{free_port()}")),
    )
    gone = Cluster.objects.create(
        name="t4-lab", access="kubeconfig", kubeconfig_path=str(tmp_path / "no-such-file")
    )
    # When work runs on h200-east, Then it reaches h200-east (down: an outage to retry)
    with kube.on_cluster(down.access_to()), pytest.raises(kube.TemporaryClusterError):
        list(kube.list_all("Node"))
    # ...and a cluster whose kubeconfig is missing says which cluster and what to fix
    with kube.on_cluster(gone.access_to()), pytest.raises(kube.PermanentClusterError) as bad:
        list(kube.list_all("Node"))
    assert "Cluster t4-lab" in bad.value.message and "admin's Clusters" in bad.value.message
    # ...while outside those blocks, and in another thread during one, work reaches the
    # first cluster
    assert list(kube.list_all("Node"))
    # (a list started in a block reads that block's cluster to its last page)
    with kube.on_cluster(down.access_to()):
        pages = kube.list_all("Node")
    with pytest.raises(kube.TemporaryClusterError):
        list(pages)
    seen: list[int] = []
    with kube.on_cluster(down.access_to()):
        other = threading.Thread(target=lambda: seen.append(len(list(kube.list_all("Node")))))
        other.start()
        other.join(timeout=30)
    assert seen and seen[0] > 0
    assert kube.current_cluster().name == settings.CLUSTER_NAME
