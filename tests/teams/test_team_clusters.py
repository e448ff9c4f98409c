"""A team is mirrored into every cluster a job may be placed on: each cluster in turn, one
that does not answer holding up no other (the first's errors still retried by the task)."""

from __future__ import annotations

from typing import Any

import pytest
from django.conf import settings

from cluster import kube
from cluster.models import Cluster
from teams import cluster_sync, kueue_config
from teams.selectors import quotas_on_cluster, teams_on_cluster
from teams.services import quota_set
from tests.factories import TeamFactory

pytestmark = pytest.mark.django_db


@pytest.fixture
def mirrored(monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """Which cluster each team's objects and Kueue's configuration were written to."""
    seen: dict[str, Any] = {"teams": [], "kueue": [], "down": set()}

    def team_sync(*, team_id: int, cluster: Cluster) -> dict[str, str]:
        name = kube.current_cluster().name
        assert cluster.name == name  # the rows read are those of the cluster written
        if name in seen["down"]:
            raise kube.TemporaryClusterError(f"connection refused ({name})")
        seen["teams"].append((name, team_id))
        return {f"Namespace/team-{team_id}": "created"}

    def kueue(read_back: bool) -> Any:
        return lambda **_: seen["kueue"].append((kube.current_cluster().name, read_back)) or {}

    monkeypatch.setattr(cluster_sync, "team_cluster_sync", team_sync)
    monkeypatch.setattr(kueue_config, "kueue_sync", kueue(True))
    monkeypatch.setattr(kueue_config, "kueue_managed_sync", kueue(False))
    return seen


def test_a_team_is_mirrored_into_every_cluster_not_disabled(mirrored: dict[str, Any]) -> None:
    team = TeamFactory()
    Cluster.first()
    for name, state in (("h200-east", "enabled"), ("old-west", "disabled")):
        Cluster.objects.create(name=name, kubeconfig_path=f"/k/{name}", state=state)

    outcome = cluster_sync.team_clusters_sync(team_id=team.pk)

    assert mirrored["teams"] == [(settings.CLUSTER_NAME, team.pk), ("h200-east", team.pk)]
    assert outcome == {
        f"Namespace/team-{team.pk}": "created",
        f"h200-east: Namespace/team-{team.pk}": "created",
    }
    # Kueue's configuration read back (or written) in the first; written in the others
    # only when the portal manages it
    assert mirrored["kueue"] == [(settings.CLUSTER_NAME, True)] + (
        [("h200-east", False)] if settings.KUEUE_MANAGED else []
    )


def test_a_cluster_that_does_not_answer_holds_up_no_other(mirrored: dict[str, Any]) -> None:
    team = TeamFactory()
    Cluster.first()
    Cluster.objects.create(name="h200-east", kubeconfig_path="/k/h200-east")
    mirrored["down"].add("h200-east")

    outcome = cluster_sync.team_clusters_sync(team_id=team.pk)

    assert mirrored["teams"] == [(settings.CLUSTER_NAME, team.pk)]
    assert outcome["h200-east: error"] == "connection refused (h200-east)"

    # The first cluster's own errors still reach the task, which retries them
    mirrored["down"] = {settings.CLUSTER_NAME}
    with pytest.raises(kube.TemporaryClusterError):
        cluster_sync.team_clusters_sync(team_id=team.pk)


def test_a_teams_namespace_belongs_only_where_it_has_quota() -> None:
    # Given a team with quota on the first cluster, one with quota only on h200-east, and
    # one given no quota yet
    first = Cluster.first()
    east = Cluster.objects.create(name="h200-east", kubeconfig_path="/k/h200-east")
    here, there = TeamFactory(slug="here"), TeamFactory(slug="there")
    TeamFactory(slug="new")
    quota_set(actor=None, team=here, resource="nvidia.com/gpu", limit=8)
    quota_set(actor=None, team=there, resource="nvidia.com/gpu", limit=8, cluster=east)

    def on(cluster: Cluster) -> set[str]:
        return set(teams_on_cluster(cluster=cluster).values_list("slug", flat=True))

    # Then each cluster holds the teams with quota there; the first also the one with none
    # anywhere (as every team did before several clusters)
    assert on(first) == {"here", "new"}
    assert on(east) == {"there"}
    # and a team's quota rows on a cluster are its own there
    assert list(quotas_on_cluster(team=there, cluster=first)) == []
    assert [q.limit for q in quotas_on_cluster(team=there, cluster=east)] == [8]
