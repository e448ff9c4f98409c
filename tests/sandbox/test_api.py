"""API surface: auth, discovery, Status error bodies, lists, selectors, deletion."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
import uuid

import pytest
from conftest import job_manifest, pod_manifest, wait_for
from kubernetes import client


def _error(call, *args, **kwargs) -> tuple[int, dict]:
    with pytest.raises(client.ApiException) as info:
        call(*args, **kwargs)
    return info.value.status, json.loads(info.value.body)


def test_requests_without_the_bearer_token_get_401(sandbox):
    # given no Authorization header
    req = urllib.request.Request(f"{sandbox.api_url}/api/v1/namespaces")
    # then the server answers 401 with an Unauthorized Status
    with pytest.raises(urllib.error.HTTPError) as info:
        urllib.request.urlopen(req, timeout=5, context=sandbox.ssl_context())
    assert info.value.code == 401
    body = json.loads(info.value.read())
    assert (body["kind"], body["reason"], body["message"]) == (
        "Status",
        "Unauthorized",
        "Unauthorized",
    )
    wrong = urllib.request.Request(
        f"{sandbox.api_url}/version", headers={"Authorization": "Bearer nope"}
    )
    with pytest.raises(urllib.error.HTTPError) as info:
        urllib.request.urlopen(wrong, timeout=5, context=sandbox.ssl_context())
    assert info.value.code == 401


def test_version_and_discovery(api_client):
    version = client.VersionApi(api_client).get_code()
    assert version.git_version.startswith("v1.33.")
    groups = {g.name for g in client.ApisApi(api_client).get_api_versions().groups}
    assert {"batch", "apps", "scheduling.k8s.io"} <= groups
    core = {r.name for r in client.CoreV1Api(api_client).get_api_resources().resources}
    assert {"pods", "pods/log", "nodes", "events", "namespaces", "resourcequotas"} <= core
    batch = client.BatchV1Api(api_client).get_api_resources()
    assert any(r.name == "jobs" and r.namespaced for r in batch.resources)


def test_conflict_not_found_and_invalid_bodies(batch, core, namespace):
    # given an existing Job
    batch.create_namespaced_job(namespace, job_manifest("dup", {"nvidia.com/gpu": 1}))
    # then a second create is 409 AlreadyExists with group details
    code, body = _error(
        batch.create_namespaced_job, namespace, job_manifest("dup", {"nvidia.com/gpu": 1})
    )
    assert code == 409
    assert body["reason"] == "AlreadyExists"
    assert body["message"] == 'jobs.batch "dup" already exists'
    assert body["details"] == {"name": "dup", "group": "batch", "kind": "jobs"}
    # and a missing pod is 404 with no group in details
    code, body = _error(core.read_namespaced_pod, "ghost", namespace)
    assert (code, body["reason"], body["message"]) == (404, "NotFound", 'pods "ghost" not found')
    assert body["details"] == {"name": "ghost", "kind": "pods"}
    # and a negative parallelism is 422 Invalid with causes
    bad = job_manifest("neg", {"nvidia.com/gpu": 1}, parallelism=-1)
    code, body = _error(batch.create_namespaced_job, namespace, bad)
    assert code == 422 and body["reason"] == "Invalid"
    assert body["message"] == (
        'Job.batch "neg" is invalid: spec.parallelism: Invalid value: -1: must be greater than '
        "or equal to 0"
    )
    assert body["details"]["causes"] == [
        {
            "reason": "FieldValueInvalid",
            "field": "spec.parallelism",
            "message": "Invalid value: -1: must be greater than or equal to 0",
        }
    ]
    # and a fractional GPU is refused as a real API server does
    code, body = _error(
        core.create_namespaced_pod, namespace, pod_manifest("half", {"nvidia.com/gpu": "0.5"})
    )
    assert code == 422
    assert (
        'spec.containers[0].resources.limits[nvidia.com/gpu]: Invalid value: "500m": '
        "must be an integer" in body["message"]
    )
    # and stale resourceVersion on replace is a 409 Conflict
    job = batch.read_namespaced_job("dup", namespace)
    job.metadata.resource_version = "1"
    code, body = _error(batch.replace_namespaced_job, "dup", namespace, job)
    assert (code, body["reason"]) == (409, "Conflict")


def test_create_in_missing_namespace_is_404(core):
    code, body = _error(
        core.create_namespaced_pod, "no-such-ns", pod_manifest("p", {"nvidia.com/gpu": 1})
    )
    assert code == 404
    assert body["message"] == 'namespaces "no-such-ns" not found'


def test_schema_type_error_is_400_and_unknown_field_strict_is_400(batch, namespace, api_client):
    bad = job_manifest("typed", {"nvidia.com/gpu": 1})
    bad["spec"]["parallelism"] = "two"
    code, body = _error(batch.create_namespaced_job, namespace, bad)
    assert code == 400 and body["reason"] == "BadRequest"
    assert "cannot be handled as a Job" in body["message"]
    extra = job_manifest("strict", {"nvidia.com/gpu": 1})
    extra["spec"]["bogus"] = 1
    code, body = _error(batch.create_namespaced_job, namespace, extra, field_validation="Strict")
    assert code == 400 and body["message"] == 'strict decoding error: unknown field "spec.bogus"'


def test_pagination_with_limit_and_continue(batch, namespace):
    for i in range(5):
        batch.create_namespaced_job(
            namespace, job_manifest(f"page-{i}", {"nvidia.com/gpu": 1}, suspend=True)
        )
    first = batch.list_namespaced_job(namespace, limit=2)
    assert [j.metadata.name for j in first.items] == ["page-0", "page-1"]
    assert first.metadata._continue and first.metadata.remaining_item_count == 3
    second = batch.list_namespaced_job(namespace, limit=2, _continue=first.metadata._continue)
    assert [j.metadata.name for j in second.items] == ["page-2", "page-3"]
    third = batch.list_namespaced_job(namespace, limit=2, _continue=second.metadata._continue)
    assert [j.metadata.name for j in third.items] == ["page-4"]
    assert not third.metadata._continue
    assert int(third.metadata.resource_version) >= int(first.metadata.resource_version)
    code, _ = _error(batch.list_namespaced_job, namespace, limit=2, _continue="garbage!")
    assert code == 400


def test_pagination_across_namespaces_follows_key_order_and_loses_nothing(batch, core):
    # given Jobs in two namespaces where one name is a prefix of the other: the API server
    # lists by the key "<ns>/<name>", and "-" sorts before "/"
    base = f"t-{uuid.uuid4().hex[:8]}"
    namespaces = [base, f"{base}-b"]
    for ns in namespaces:
        core.create_namespace({"metadata": {"name": ns}})
        for i in range(3):
            batch.create_namespaced_job(
                ns, job_manifest(f"page-{i}", {"nvidia.com/gpu": 1}, suspend=True)
            )
    try:
        # when every page of two is read across all namespaces
        seen: list[str] = []
        token = None
        while True:
            page = batch.list_job_for_all_namespaces(limit=2, _continue=token)
            seen += [
                f"{j.metadata.namespace}/{j.metadata.name}"
                for j in page.items
                if j.metadata.namespace in namespaces
            ]
            token = page.metadata._continue
            if not token:
                break
        # then each Job comes exactly once, in key order
        expected = sorted(f"{ns}/page-{i}" for ns in namespaces for i in range(3))
        assert seen == expected
        assert seen[0].startswith(f"{base}-b/")
    finally:
        for ns in namespaces:
            core.delete_namespace(ns)


def test_stale_continue_token_is_410(batch, namespace, sandbox):
    for i in range(3):
        batch.create_namespaced_job(
            namespace, job_manifest(f"old-{i}", {"nvidia.com/gpu": 1}, suspend=True)
        )
    token = batch.list_namespaced_job(namespace, limit=1).metadata._continue
    # continue tokens expire after 300 simulated seconds (5 real seconds at speed 60)
    wait_for(lambda: _expired(batch, namespace, token), timeout=15, interval=0.5)


def _expired(batch, namespace, token) -> bool:
    try:
        batch.list_namespaced_job(namespace, limit=1, _continue=token)
        return False
    except client.ApiException as exc:
        body = json.loads(exc.body)
        return exc.status == 410 and body["reason"] == "Expired"


def test_label_and_field_selectors(core, batch, namespace):
    for name, team in (("sel-a", "vision"), ("sel-b", "nlp"), ("sel-c", "vision")):
        body = pod_manifest(name, {"cpu": "100m"}, tolerate=False)
        body["metadata"]["labels"] = {"team": team, "tier": "gpu" if name != "sel-c" else "cpu"}
        core.create_namespaced_pod(namespace, body)
    names = lambda items: sorted(p.metadata.name for p in items)  # noqa: E731
    assert names(core.list_namespaced_pod(namespace, label_selector="team=vision").items) == [
        "sel-a",
        "sel-c",
    ]
    assert names(
        core.list_namespaced_pod(namespace, label_selector="team in (nlp,vision),tier!=cpu").items
    ) == ["sel-a", "sel-b"]
    assert names(core.list_namespaced_pod(namespace, label_selector="!tier").items) == []
    assert names(
        core.list_namespaced_pod(namespace, field_selector="metadata.name=sel-b").items
    ) == ["sel-b"]
    everywhere = core.list_pod_for_all_namespaces(field_selector=f"metadata.namespace={namespace}")
    assert names(everywhere.items) == ["sel-a", "sel-b", "sel-c"]
    wait_for(
        lambda: (
            len(core.list_namespaced_pod(namespace, field_selector="status.phase=Running").items)
            == 3
            or None
        )
    )
    on_cpu = core.list_namespaced_pod(namespace, field_selector="spec.nodeName=cpu-0").items
    assert names(on_cpu) == ["sel-a", "sel-b", "sel-c"]
    code, body = _error(core.list_namespaced_pod, namespace, field_selector="spec.bogus=1")
    assert code == 400 and body["message"] == "field label not supported: spec.bogus"


def test_delete_propagation_background_orphan_foreground(core, batch, namespace):
    def pods_of(job):
        return core.list_namespaced_pod(namespace, label_selector=f"job-name={job}").items

    ann = {"sandbox.gpu-portal.dev/duration": "2h"}
    for name in ("bg", "orphan", "fg"):
        batch.create_namespaced_job(
            namespace, job_manifest(name, {"cpu": "100m"}, annotations=ann, tolerate=False)
        )
    for name in ("bg", "orphan", "fg"):
        wait_for(lambda n=name: pods_of(n) or None)
    # Background: the Job goes now and its pods follow
    batch.delete_namespaced_job("bg", namespace, propagation_policy="Background")
    wait_for(lambda: not pods_of("bg") or None)
    # Orphan: the pods stay without owner references
    batch.delete_namespaced_job("orphan", namespace, propagation_policy="Orphan")
    remaining = pods_of("orphan")
    assert remaining and not remaining[0].metadata.owner_references
    # Foreground: the Job waits for its pods with a finalizer, then goes
    batch.delete_namespaced_job("fg", namespace, propagation_policy="Foreground")
    wait_for(
        lambda: (
            not batch.list_namespaced_job(namespace, field_selector="metadata.name=fg").items
            or None
        )
    )
    assert not pods_of("fg")
    assert pods_of("orphan")


def test_patch_suspend_labels_and_replace(batch, namespace):
    batch.create_namespaced_job(
        namespace, job_manifest("patchme", {"cpu": "100m"}, tolerate=False, suspend=True)
    )
    job = batch.patch_namespaced_job(
        "patchme", namespace, {"metadata": {"labels": {"team": "vision"}}}
    )
    assert job.metadata.labels["team"] == "vision"
    assert job.metadata.labels["app"] == "patchme"  # merged, not replaced
    suspended = wait_for(
        lambda: next(
            (
                c
                for c in batch.read_namespaced_job("patchme", namespace).status.conditions or []
                if c.type == "Suspended"
            ),
            None,
        )
    )
    assert (suspended.status, suspended.reason) == ("True", "JobSuspended")
    job = batch.patch_namespaced_job("patchme", namespace, {"spec": {"suspend": False}})
    assert job.spec.suspend is False and job.metadata.generation == 2
    resumed = wait_for(lambda: batch.read_namespaced_job("patchme", namespace).status.active)
    assert resumed == 1
