"""Watches as the official client uses them: events in order, resuming from a
resourceVersion, 410 Gone past the window, bookmarks, WatchList's initial events."""

from __future__ import annotations

import json
import threading
import uuid
from typing import Any

import pytest
from conftest import make_client
from kubernetes import client, watch

from tests.sandbox_process import SandboxProcess, start_sandbox


def cm(name: str, value: str = "1") -> dict[str, Any]:
    return {"metadata": {"name": name, "labels": {"watched": "yes"}}, "data": {"v": value}}


def collect(
    core: client.CoreV1Api, namespace: str, *, count: int, **kwargs: Any
) -> list[tuple[str, str, str]]:
    """(type, name, resourceVersion) of the first ``count`` events."""
    seen: list[tuple[str, str, str]] = []
    stream = watch.Watch()
    for event in stream.stream(
        core.list_namespaced_config_map, namespace, timeout_seconds=10, **kwargs
    ):
        obj = event["object"]
        seen.append((event["type"], obj.metadata.name, obj.metadata.resource_version))
        if len(seen) == count:
            stream.stop()
    return seen


def test_changes_arrive_in_order_with_rising_versions(core: client.CoreV1Api, namespace: str):
    # Given a watch from "now" on a namespace with one ConfigMap already in it
    core.create_namespaced_config_map(namespace, cm("before"))
    start = core.list_namespaced_config_map(namespace).metadata.resource_version
    results: list[list[tuple[str, str, str]]] = []
    watcher = threading.Thread(
        target=lambda: results.append(collect(core, namespace, count=3, resource_version=start))
    )
    watcher.start()
    # When a ConfigMap is created, changed and deleted
    core.create_namespaced_config_map(namespace, cm("a"))
    core.patch_namespaced_config_map("a", namespace, {"data": {"v": "2"}})
    core.delete_namespaced_config_map("a", namespace)
    watcher.join(timeout=15)
    # Then the watch saw exactly those three changes, in order, and nothing from before
    events = results[0]
    assert [(t, n) for t, n, _ in events] == [("ADDED", "a"), ("MODIFIED", "a"), ("DELETED", "a")]
    versions = [int(rv) for _, _, rv in events]
    assert versions == sorted(versions) and versions[0] > int(start)


def test_a_watch_resumes_from_a_resource_version(core: client.CoreV1Api, namespace: str):
    # Given three changes made while no one watched
    first = core.create_namespaced_config_map(namespace, cm("one"))
    core.create_namespaced_config_map(namespace, cm("two"))
    core.patch_namespaced_config_map("one", namespace, {"data": {"v": "3"}})
    # When a client resumes from the version of the first change
    events = collect(core, namespace, count=2, resource_version=first.metadata.resource_version)
    # Then it gets the two changes after it, and not the first again
    assert [(t, n) for t, n, _ in events] == [("ADDED", "two"), ("MODIFIED", "one")]


def test_without_a_version_a_watch_starts_with_every_object(core: client.CoreV1Api, namespace: str):
    core.create_namespaced_config_map(namespace, cm("x"))
    core.create_namespaced_config_map(namespace, cm("y"))
    events = collect(core, namespace, count=2)
    assert sorted((t, n) for t, n, _ in events) == [("ADDED", "x"), ("ADDED", "y")]


def _raw_watch(api: client.ApiClient, path: str) -> list[dict[str, Any]]:
    response = api.call_api(
        path, "GET", auth_settings=["BearerToken"], _preload_content=False, _request_timeout=15
    )[0]
    return [json.loads(line) for line in response.read().decode().splitlines() if line]


def test_send_initial_events_ends_with_the_initial_events_end_bookmark(
    api_client: client.ApiClient, core: client.CoreV1Api, namespace: str
):
    core.create_namespaced_config_map(namespace, cm("x"))
    events = _raw_watch(
        api_client,
        f"/api/v1/namespaces/{namespace}/configmaps?watch=true&sendInitialEvents=true"
        "&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true&timeoutSeconds=1",
    )
    assert [e["type"] for e in events[:2]] == ["ADDED", "BOOKMARK"]
    end = events[1]["object"]["metadata"]
    assert end["annotations"] == {"k8s.io/initial-events-end": "true"}
    assert int(end["resourceVersion"]) >= int(events[0]["object"]["metadata"]["resourceVersion"])


def test_bookmarks_carry_the_latest_version_when_asked(
    api_client: client.ApiClient, core: client.CoreV1Api, namespace: str
):
    start = core.list_namespaced_config_map(namespace).metadata.resource_version
    # Something changes elsewhere in the cluster: the bookmark still moves on
    core.create_namespaced_config_map("default", cm(f"elsewhere-{uuid.uuid4().hex[:6]}"))
    events = _raw_watch(
        api_client,
        f"/api/v1/namespaces/{namespace}/configmaps?watch=true&resourceVersion={start}"
        "&allowWatchBookmarks=true&timeoutSeconds=7",
    )
    marks = [e for e in events if e["type"] == "BOOKMARK"]
    assert marks, events
    assert int(marks[-1]["object"]["metadata"]["resourceVersion"]) > int(start)
    assert marks[-1]["object"]["kind"] == "ConfigMap"


@pytest.fixture(scope="module")
def small_window(tmp_path_factory: pytest.TempPathFactory) -> Any:
    proc = start_sandbox(
        tmp_path_factory.mktemp("window"),
        profile="small",
        speed=60,
        extra_args=("--watch-window", "50"),
        control_plane="python",
    )
    yield proc
    proc.stop()


def test_a_version_older_than_the_window_is_410_gone(small_window: SandboxProcess):
    # Given a sandbox whose watch cache holds 50 changes, and 100 changes since version v
    core = client.CoreV1Api(make_client(small_window))
    namespace = f"w-{uuid.uuid4().hex[:6]}"
    core.create_namespace({"metadata": {"name": namespace}})
    old = core.list_namespaced_config_map(namespace).metadata.resource_version
    for i in range(100):
        core.create_namespaced_config_map(namespace, cm(f"c{i}"))
    # When a client resumes from v
    events = _raw_watch(
        make_client(small_window),
        f"/api/v1/namespaces/{namespace}/configmaps?watch=true&resourceVersion={old}"
        "&timeoutSeconds=5",
    )
    # Then it gets one ERROR event: a 410 Expired Status, in the real shape
    assert len(events) == 1 and events[0]["type"] == "ERROR"
    status = events[0]["object"]
    assert (status["kind"], status["code"], status["reason"]) == ("Status", 410, "Expired")
    assert status["message"].startswith(f"too old resource version: {old} (")
    # and the official client's watch turns it into an ApiException it can relist on
    with pytest.raises(client.ApiException) as gone:
        collect(core, namespace, count=1, resource_version=old)
    assert gone.value.status == 410
