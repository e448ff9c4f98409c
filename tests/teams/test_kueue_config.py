"""Kueue's configuration written from the portal's teams (Kueue mode, managed): the objects
for the demo's teams and catalog match golden files (``UPDATE_GOLDEN=1`` rewrites them), and
the sync against a real API server with Kueue (the sandbox) creates them, follows a quota
change, removes a gone team's objects and leaves everything else alone."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from cluster import kube
from cluster.selectors import catalog_get
from teams.kueue_config import (
    cluster_queue,
    kueue_config_sync,
    local_queue,
    quotas_from_cluster_queue,
    resource_flavors,
)
from teams.models import GpuQuota, Team
from tests.sandbox_process import SandboxProcess
from tests.worker_process import wait_for

GOLDEN = Path(__file__).parent / "golden"


def golden(name: str, objects: Any) -> None:
    path = GOLDEN / f"{name}.json"
    text = json.dumps(objects, indent=2, sort_keys=True) + "\n"
    if os.environ.get("UPDATE_GOLDEN") == "1":
        path.write_text(text)
    assert path.exists(), f"{path} is missing: run with UPDATE_GOLDEN=1 to write it"
    assert text == path.read_text(), f"{path} differs (UPDATE_GOLDEN=1 rewrites it)"


def test_the_demos_kueue_objects_match_their_golden_files(research: dict[str, Any]) -> None:
    catalog = catalog_get()
    teams = research["teams"]
    golden("kueue-flavors", resource_flavors(catalog))
    for slug in ("vision", "nlp"):
        team = teams[slug]
        golden(
            f"kueue-{slug}", [cluster_queue(team, team.quotas.all(), catalog), local_queue(team)]
        )


def test_limits_follow_the_quota_rows_and_need_a_cohort(research: dict[str, Any]) -> None:
    catalog = catalog_get()
    vision = research["teams"]["vision"]
    GpuQuota.objects.filter(team=vision, resource="nvidia.com/gpu").update(
        borrowing_limit=4, lending_limit=2
    )
    queue = cluster_queue(vision, vision.quotas.all(), catalog)
    gpus = queue["spec"]["resourceGroups"][1]["flavors"][0]["resources"][0]
    assert gpus == {
        "name": "nvidia.com/gpu",
        "nominalQuota": "16",
        "borrowingLimit": "4",
        "lendingLimit": "2",
    }
    assert queue["spec"]["cohortName"] == "research"
    # Out of the cohort, Kueue refuses limits: none are written
    Team.objects.filter(pk=vision.pk).update(cohort=None)
    alone = Team.objects.get(pk=vision.pk)
    queue = cluster_queue(alone, alone.quotas.all(), catalog)
    gpus = queue["spec"]["resourceGroups"][1]["flavors"][0]["resources"][0]
    assert gpus == {"name": "nvidia.com/gpu", "nominalQuota": "16"}
    assert "cohortName" not in queue["spec"] and "fairSharing" not in queue["spec"]


@pytest.fixture
def kueue_cluster(local_cluster: SandboxProcess) -> SandboxProcess:
    return local_cluster


def test_the_sync_writes_follows_and_cleans_up_kueues_objects(
    research: dict[str, Any], kueue_cluster: SandboxProcess, settings: Any
) -> None:
    settings.KUBECONFIG, settings.KUBE_CONTEXT = str(kueue_cluster.kubeconfig), ""
    kube.reset_client()
    try:
        for team in Team.objects.all():
            kube.ensure(
                {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": team.namespace}},
                compare=lambda existing, wanted: True,
            )
        # A ClusterQueue of the platform team's own, which the portal must never touch
        kube.create(
            {
                "apiVersion": "kueue.x-k8s.io/v1beta2",
                "kind": "ClusterQueue",
                "metadata": {"name": "platform-own"},
                "spec": {"namespaceSelector": {}},
            }
        )
        catalog = catalog_get()
        teams = list(Team.objects.all())
        # When the sync runs, Then every object is created, and a second run changes nothing
        first = kueue_config_sync(teams=teams, catalog=catalog)
        assert first["ClusterQueue/vision"] == "created"
        assert first["LocalQueue/team-vision/gpu-portal"] == "created"
        assert set(kueue_config_sync(teams=teams, catalog=catalog).values()) == {"unchanged"}
        assert kube.get("ClusterQueue", "vision")["spec"]["queueingStrategy"] == "StrictFIFO"
        # When a quota changes, Then the ClusterQueue follows
        GpuQuota.objects.filter(team__slug="vision", resource="nvidia.com/gpu").update(limit=24)
        changed = kueue_config_sync(teams=Team.objects.all(), catalog=catalog)
        assert changed["ClusterQueue/vision"] == "updated"
        flavors = kube.get("ClusterQueue", "vision")["spec"]["resourceGroups"][1]["flavors"]
        assert {f["resources"][0]["nominalQuota"] for f in flavors} == {"24"}
        # When a borrowing limit is set, then removed, Then the ClusterQueue loses it again
        GpuQuota.objects.filter(team__slug="vision", resource="nvidia.com/gpu").update(
            borrowing_limit=4
        )
        assert kueue_config_sync(teams=Team.objects.all(), catalog=catalog)[
            "ClusterQueue/vision"] == "updated"  # fmt: skip
        GpuQuota.objects.filter(team__slug="vision", resource="nvidia.com/gpu").update(
            borrowing_limit=None
        )
        assert kueue_config_sync(teams=Team.objects.all(), catalog=catalog)[
            "ClusterQueue/vision"] == "updated"  # fmt: skip
        spec = kube.get("ClusterQueue", "vision")["spec"]
        assert all(
            "borrowingLimit" not in r
            for g in spec["resourceGroups"]
            for f in g["flavors"]
            for r in f["resources"]
        ), spec["resourceGroups"]
        # When vision leaves its cohort, Then its ClusterQueue leaves Kueue's cohort too (a
        # queue left in it would go on borrowing from the others)
        Team.objects.filter(slug="vision").update(cohort=None)
        assert kueue_config_sync(teams=Team.objects.all(), catalog=catalog)[
            "ClusterQueue/vision"] == "updated"  # fmt: skip
        spec = kube.get("ClusterQueue", "vision")["spec"]
        assert "cohortName" not in spec and "fairSharing" not in spec, spec
        # When a team is gone, Then its queues go, and nothing that is not the portal's
        gone = kueue_config_sync(teams=Team.objects.exclude(slug="speech"), catalog=catalog)
        assert gone["ClusterQueue/speech"] == "deleted"
        assert gone["LocalQueue/team-speech/gpu-portal"] == "deleted"
        # (Kueue's finalizer lets a deleted ClusterQueue go once nothing holds its quota)
        names = wait_for(
            lambda: (
                "speech"
                not in (n := {q["metadata"]["name"] for q in kube.list_all("ClusterQueue")})
                and n
            )
        )
        assert {"platform-own", "vision", "nlp"} <= names
    finally:
        kube.delete("ClusterQueue", "platform-own")
        kube.reset_client()


def test_a_cluster_queue_reads_back_as_the_quota_rows_it_was_written_from(
    research: dict[str, Any],
) -> None:
    # Given the ClusterQueue the portal writes for each demo team, and the flavors
    catalog = catalog_get()
    flavors = {f["metadata"]["name"]: f for f in resource_flavors(catalog)}
    for team in research["teams"].values():
        written = cluster_queue(team, team.quotas.all(), catalog)
        # When Kueue run by a platform team hands the portal that ClusterQueue
        read = quotas_from_cluster_queue(written, flavors)
        # Then the portal reads the team's own quotas back: products, any-GPU, MIG, limits
        # (a resource at 0 with no limits is what no row means)
        got = {
            r: (q.limit, q.borrowing_limit, q.lending_limit)
            for r, q in read.items()
            if (q.limit, q.borrowing_limit, q.lending_limit) != (0, None, None)
        }
        want = {
            q.resource: (q.limit, q.borrowing_limit, q.lending_limit)
            for q in team.quotas.all()
            if team.cohort_id or (q.borrowing_limit, q.lending_limit) == (None, None)
        }
        assert got == want, team.slug
