"""The policy refuses every unsafe manifest shape by rule name; generated manifests pass."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import pytest
from rest_framework.test import APIClient

from cluster.models import CatalogSettings
from jobs.manifests import ManifestContext, build_manifests
from jobs.manifests.security import check_manifest, check_manifests, image_registry
from jobs.models import Job
from jobs.spec import GpuRequest, JobSpec
from tests.conftest import training_spec

NS = "team-vision"


def job_manifest() -> dict[str, Any]:
    spec = JobSpec(team="vision", name="p", kind="training", image="nvcr.io/x/y:1",
                   gpu=GpuRequest(count=1))  # fmt: skip
    (manifest,) = build_manifests(spec, ManifestContext(job_id=1, namespace=NS))
    return manifest


def pytorchjob_manifest() -> dict[str, Any]:
    spec = JobSpec(team="vision", name="p", kind="training", image="nvcr.io/x/y:1",
                   gpu=GpuRequest(count=1), launcher="pytorchjob", workers=2)  # fmt: skip
    (manifest,) = build_manifests(spec, ManifestContext(job_id=1, namespace=NS))
    return manifest


def trainjob_manifest() -> dict[str, Any]:
    spec = JobSpec(team="vision", name="p", kind="training", image="nvcr.io/x/y:1",
                   gpu=GpuRequest(count=1), launcher="trainjob", workers=2)  # fmt: skip
    (manifest,) = build_manifests(spec, ManifestContext(job_id=1, namespace=NS))
    return manifest


def pod(m: dict[str, Any]) -> dict[str, Any]:
    """The pod spec a mutation breaks: a PyTorchJob's Worker replica's, a TrainJob's runtime
    patch's."""
    if m["kind"] == "PyTorchJob":
        return m["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]
    if m["kind"] == "TrainJob":
        (node,) = m["spec"]["runtimePatches"][0]["trainingRuntimeSpec"]["template"]["spec"][
            "replicatedJobs"]  # fmt: skip
        return node["template"]["spec"]["template"]["spec"]
    return m["spec"]["template"]["spec"]


def no_token_setting(m: dict[str, Any]) -> None:
    """Neither the pod's own ``automountServiceAccountToken: false`` nor the team's
    tokenless ServiceAccount: the pod would mount the default account's token."""
    pod(m).pop("automountServiceAccountToken", None)
    pod(m).pop("serviceAccountName", None)


def container(m: dict[str, Any]) -> dict[str, Any]:
    return pod(m)["containers"][0]


MUTATIONS: list[tuple[str, Callable[[dict[str, Any]], None]]] = [
    ("namespace", lambda m: m["metadata"].update(namespace="team-nlp")),
    ("host-namespaces", lambda m: pod(m).update(hostNetwork=True)),
    ("host-namespaces", lambda m: pod(m).update(hostPID=True)),
    ("host-namespaces", lambda m: pod(m).update(hostIPC=True)),
    ("automount-service-account-token", no_token_setting),
    ("automount-service-account-token",
     lambda m: pod(m).update(automountServiceAccountToken=True)),
    ("host-path", lambda m: pod(m)["volumes"].append({"name": "h", "hostPath": {"path": "/"}})),
    ("volume-types", lambda m: pod(m)["volumes"].append({"name": "n", "nfs": {"server": "x"}})),
    ("privileged", lambda m: container(m)["securityContext"].update(privileged=True)),
    ("allow-privilege-escalation",
     lambda m: container(m)["securityContext"].update(allowPrivilegeEscalation=True)),
    ("capabilities", lambda m: container(m)["securityContext"].update(capabilities={})),
    ("capabilities",
     lambda m: container(m)["securityContext"]["capabilities"].update(add=["SYS_ADMIN"])),
    ("run-as-non-root", lambda m: container(m)["securityContext"].update(runAsNonRoot=False)),
    ("run-as-non-root", lambda m: container(m)["securityContext"].update(runAsUser=0)),
    ("seccomp", lambda m: pod(m)["securityContext"].update(seccompProfile={"type": "Unconfined"})),
    ("host-ports", lambda m: container(m).update(ports=[{"containerPort": 80, "hostPort": 80}])),
    ("privileged", lambda m: pod(m).setdefault("initContainers", []).append(
        {**copy.deepcopy(container(m)), "name": "init",
         "securityContext": {**container(m)["securityContext"], "privileged": True}})),
]  # fmt: skip


LAUNCHERS = {"job": job_manifest, "pytorchjob": pytorchjob_manifest, "trainjob": trainjob_manifest}


@pytest.mark.parametrize("launcher", sorted(LAUNCHERS))
def test_generated_manifests_pass_the_policy(launcher: str) -> None:
    assert check_manifest(LAUNCHERS[launcher](), namespace=NS) == []


@pytest.mark.parametrize("launcher", sorted(LAUNCHERS))
@pytest.mark.parametrize("rule,mutate", MUTATIONS)
def test_each_unsafe_shape_is_refused_by_its_rule(
    rule: str, mutate: Callable[[dict[str, Any]], None], launcher: str
) -> None:
    manifest = LAUNCHERS[launcher]()
    mutate(manifest)

    violations = check_manifest(manifest, namespace=NS)

    assert rule in {v.rule for v in violations}, violations


@pytest.mark.parametrize(
    "image,registry",
    [
        ("nvcr.io/nvidia/pytorch:24.05-py3", "nvcr.io"),
        ("pytorch/pytorch:latest", "docker.io"),
        ("ubuntu", "docker.io"),
        ("localhost/x:1", "localhost"),
        ("registry.example.com:5000/team/img@sha256:" + "a" * 64, "registry.example.com:5000"),
    ],
)
def test_image_registry(image: str, registry: str) -> None:
    assert image_registry(image) == registry


def test_registry_allow_list_applies_only_when_configured() -> None:
    manifest = job_manifest()
    assert check_manifests([manifest], namespace=NS, allowed_registries=[]) == []
    assert check_manifests([manifest], namespace=NS, allowed_registries=["nvcr.io"]) == []
    (violation,) = check_manifests([manifest], namespace=NS, allowed_registries=["ghcr.io"])
    assert violation.rule == "image-registry"


@pytest.mark.django_db
def test_submitting_an_image_from_a_registry_not_allowed_is_refused(
    alice_api: APIClient,
) -> None:
    CatalogSettings.objects.update(allowed_registries="nvcr.io\nghcr.io")

    refused = alice_api.post(
        "/api/v1/jobs/", training_spec(image="docker.io/library/python:3.12"), format="json"
    )
    allowed = alice_api.post("/api/v1/jobs/", training_spec(name="ok"), format="json")

    assert refused.status_code == 400
    assert "registry docker.io is not allowed" in refused.json()["errors"]["image"][0]
    assert allowed.status_code == 201
    assert Job.objects.count() == 1
