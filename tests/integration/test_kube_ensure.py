"""``kube.ensure`` against a real API server (the sandbox): a replace that loses a race to
another writer (409 Conflict on a stale resourceVersion) is compared again on the object as
it now is and retried, as client-go's RetryOnConflict does; a writer that never lets go
gets the conflict after a bounded number of tries."""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes import client, config

from cluster import kube
from tests.sandbox_process import SandboxProcess

NAMESPACE = "default"


def quota(name: str, gpus: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ResourceQuota",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": {"hard": {"requests.nvidia.com/gpu": gpus}},
    }


def same_data(existing: dict[str, Any], wanted: dict[str, Any]) -> bool:
    return existing["spec"].get("hard") == wanted["spec"]["hard"]


def other_writer(sandbox: SandboxProcess) -> Any:
    return client.CoreV1Api(config.new_client_from_config(config_file=str(sandbox.kubeconfig)))


def test_a_replace_that_loses_a_race_is_retried_on_the_new_version(cluster: SandboxProcess) -> None:
    # Given a ResourceQuota the portal manages, and another writer that changes it between
    # the portal's read and its replace (its labels: the portal's limits still differ)
    assert kube.ensure(quota("raced", "8"), compare=same_data) == "created"
    core, seen = other_writer(cluster), []

    def compare(existing: dict[str, Any], wanted: dict[str, Any]) -> bool:
        seen.append(existing["metadata"]["resourceVersion"])
        if len(seen) == 1:
            core.patch_namespaced_resource_quota(
                "raced", NAMESPACE, {"metadata": {"labels": {"x": "1"}}}
            )
        return same_data(existing, wanted)

    # When the portal ensures a new limit
    outcome = kube.ensure(quota("raced", "16"), compare=compare)

    # Then its first replace was refused, and the second, on the version it read again, won
    assert outcome == "updated" and len(seen) == 2 and seen[0] != seen[1]
    hard = core.read_namespaced_resource_quota("raced", NAMESPACE).spec.hard
    assert hard == {"requests.nvidia.com/gpu": "16"}


def test_a_writer_that_always_wins_gives_the_conflict_after_bounded_tries(
    cluster: SandboxProcess,
) -> None:
    kube.ensure(quota("contended", "8"), compare=same_data)
    core, tries = other_writer(cluster), []

    def compare(existing: dict[str, Any], wanted: dict[str, Any]) -> bool:
        tries.append(1)
        core.patch_namespaced_resource_quota(
            "contended", NAMESPACE, {"metadata": {"labels": {"n": str(len(tries))}}}
        )
        return same_data(existing, wanted)

    with pytest.raises(kube.ObjectConflict):
        kube.ensure(quota("contended", "16"), compare=compare)
    assert len(tries) == kube.CONFLICT_TRIES
