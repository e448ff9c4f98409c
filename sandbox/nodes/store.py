"""What the simulated nodes know of the cluster: an informer cache fed by the real API
server's watches, and writes that go to the API server, as a kubelet's do.

``NodeStore`` keeps the ``Store`` surface the node-side modules were written against
(``get``/``iter``/``put``/``delete`` and the private ``meta_*`` state: device assignments,
container lives, faults), so the kubelet, the DCGM exporter, the GPU faults and the GPU
Operator's node side did not have to be rewritten to move onto the real control plane. What
changed is underneath:

- objects (pods, nodes, claims, config maps, secrets, ClusterPolicies) come from list +
  watch on the API server (resuming from the resourceVersion, relisting on 410) and are
  stored as the server sent them;
- ``put`` of a pod writes its status through ``pods/<name>/status`` (all a kubelet may
  change); of a node, its labels and taints through the node and its status through
  ``nodes/<name>/status``; of a ClusterPolicy, its status. The server's answer is what is
  cached. A conflict (409) caches the server's newer object and the change is made again
  on the next pass, as a controller's would;
- ``delete`` of a pod is the kubelet's final delete: grace period 0, with the pod's UID as
  a precondition, so a new pod of the same name is never removed.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kubernetes import client as k8s
from kubernetes.client.rest import ApiException

from sandbox.store import Obj, Store

log = logging.getLogger("sandbox.nodes")
WATCH_SECONDS = 240
RETRY_SECONDS = 1.0


@dataclass(frozen=True)
class Resource:
    key: str  # the cache's name for it (the old store's)
    group: str
    version: str
    plural: str
    namespaced: bool
    status: bool = True  # has a status subresource the node side writes

    def path(self, namespace: str = "", name: str = "", sub: str = "") -> str:
        base = f"/api/{self.version}" if not self.group else f"/apis/{self.group}/{self.version}"
        if self.namespaced and namespace:
            base += f"/namespaces/{namespace}"
        base += f"/{self.plural}"
        if name:
            base += f"/{name}"
        if sub:
            base += f"/{sub}"
        return base


WATCHED = (
    Resource("pods", "", "v1", "pods", True),
    Resource("nodes", "", "v1", "nodes", False),
    Resource("persistentvolumeclaims", "", "v1", "persistentvolumeclaims", True, status=False),
    Resource("persistentvolumes", "", "v1", "persistentvolumes", False, status=False),
    Resource("configmaps", "", "v1", "configmaps", True, status=False),
    Resource("secrets", "", "v1", "secrets", True, status=False),
    Resource("clusterpolicies.nvidia.com", "nvidia.com", "v1", "clusterpolicies", False),
)
BY_KEY = {r.key: r for r in WATCHED}


class Api:
    """The few REST calls the nodes make, through the official client's ApiClient."""

    def __init__(self, api_client: k8s.ApiClient) -> None:
        self.client = api_client

    def call(
        self,
        method: str,
        path: str,
        body: Any = None,
        query: list[tuple[str, Any]] | None = None,
        *,
        stream: bool = False,
        timeout: float | tuple[float, float] = 30,
        content_type: str = "application/json",
    ) -> Any:
        response = self.client.call_api(
            path,
            method,
            query_params=query or [],
            header_params={"Content-Type": content_type, "Accept": "application/json"},
            body=body,
            auth_settings=["BearerToken"],
            _preload_content=False,
            _request_timeout=timeout,
        )[0]
        if stream:
            return response
        data = response.data
        return json.loads(data) if data else None

    def get(self, res: Resource, namespace: str, name: str) -> Obj | None:
        try:
            obj: Obj = self.call("GET", res.path(namespace, name))
            return obj
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise


class NodeStore(Store):
    """The cache and the write path of the simulated nodes (see the module docstring)."""

    def __init__(self, path: str | Path, api: Api, *, reset: bool = False) -> None:
        super().__init__(path, reset=reset)
        self.api = api
        # Cached objects come from the server: forget what an earlier run cached.
        for res in WATCHED:
            for obj in list(self.list(res.key)):
                Store.delete(
                    self, res.key, obj["metadata"].get("namespace", ""), obj["metadata"]["name"]
                )
        self._synced = {res.key: threading.Event() for res in WATCHED}
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []

    # -- the cache, fed by watches --------------------------------------------------------
    def start(self, timeout: float = 60) -> None:
        for res in WATCHED:
            thread = threading.Thread(
                target=self._follow, args=(res,), name=f"watch-{res.key}", daemon=True
            )
            thread.start()
            self._threads.append(thread)
        deadline = time.monotonic() + timeout
        for key, synced in self._synced.items():
            if not synced.wait(max(0.1, deadline - time.monotonic())):
                raise TimeoutError(f"the API server's {key} were not listed in {timeout:.0f}s")

    def stop(self) -> None:
        self._stop.set()

    def _follow(self, res: Resource) -> None:
        """List, then watch from the list's version; relist when the version is gone."""
        while not self._stop.is_set():
            try:
                listed = self.api.call("GET", res.path())
                version = listed["metadata"]["resourceVersion"]
                self._replace_all(res, listed.get("items") or [])
                self._synced[res.key].set()
                while not self._stop.is_set():
                    version = self._watch(res, version)
            except _Gone:
                continue  # relist
            except Exception as exc:  # noqa: BLE001 - the server restarting, a dropped connection
                if not self._stop.is_set():
                    log.info("watch of %s ended (%s); listing again", res.key, exc)
                    self._stop.wait(RETRY_SECONDS)

    def _watch(self, res: Resource, version: str) -> str:
        response = self.api.call(
            "GET",
            res.path(),
            query=[
                ("watch", "true"),
                ("resourceVersion", version),
                ("allowWatchBookmarks", "true"),
                ("timeoutSeconds", WATCH_SECONDS),
            ],
            stream=True,
            timeout=(10, WATCH_SECONDS + 30),
        )
        try:
            pending = b""
            for chunk in response.stream(65536, decode_content=True):
                pending += chunk
                *lines, pending = pending.split(b"\n")
                for line in lines:
                    if line.strip():
                        version = self._apply_event(res, json.loads(line), version)
                if self._stop.is_set():
                    break
        finally:
            response.release_conn()
        return version

    def _apply_event(self, res: Resource, event: dict[str, Any], version: str) -> str:
        kind, obj = event.get("type"), event.get("object") or {}
        if kind == "ERROR":
            if obj.get("code") == 410:
                raise _Gone
            raise RuntimeError(obj.get("message", "watch error"))
        meta = obj.get("metadata") or {}
        with self.lock:
            if kind in ("ADDED", "MODIFIED"):
                self._cache(res.key, obj)
            elif kind == "DELETED":
                Store.delete(self, res.key, meta.get("namespace", ""), meta["name"])
        return str(meta.get("resourceVersion") or version)

    def _replace_all(self, res: Resource, items: list[Obj]) -> None:
        with self.lock:
            fresh = {(o["metadata"].get("namespace", ""), o["metadata"]["name"]) for o in items}
            for obj in list(self.list(res.key)):
                key = (obj["metadata"].get("namespace", ""), obj["metadata"]["name"])
                if key not in fresh:
                    Store.delete(self, res.key, *key)
            for obj in items:
                self._cache(res.key, obj)

    def _cache(self, key: str, obj: Obj) -> Obj:
        """Keep ``obj`` as the server sent it (its own resourceVersion), newer ones only."""
        meta = obj["metadata"]
        ns, name = meta.get("namespace", ""), meta["name"]
        held = self.get(key, ns, name)
        if (
            held is not None
            and held["metadata"].get("uid") == meta.get("uid")
            and int(held["metadata"].get("resourceVersion") or 0)
            > int(meta.get("resourceVersion") or 0)
        ):
            return held
        version = meta.get("resourceVersion")
        Store.put(self, key, obj)  # stamps its own version: put the server's back
        meta["resourceVersion"] = version
        return obj

    # -- writes, through the API server ---------------------------------------------------
    def put(self, res: str, obj: Obj) -> Obj:
        resource = BY_KEY.get(res)
        if resource is None:  # the nodes' own bookkeeping objects stay local
            return super().put(res, obj)
        meta = obj["metadata"]
        ns, name = meta.get("namespace", ""), meta["name"]
        try:
            if res == "nodes":
                obj = self._put_node(resource, obj)
            elif resource.status:
                obj = self.api.call("PUT", resource.path(ns, name, "status"), obj)
            else:
                obj = self.api.call("PUT", resource.path(ns, name), obj)
        except ApiException as exc:
            if exc.status not in (404, 409, 422):
                raise
            # Changed or gone meanwhile: cache what the server has; the next pass redoes it.
            log.debug("%s %s/%s: %s", res, ns, name, exc.reason)
            current = self.api.get(resource, ns, name)
            if current is None:
                Store.delete(self, res, ns, name)
                return obj
            return self._cache(res, current)
        return self._cache(res, obj)

    def _put_node(self, resource: Resource, node: Obj) -> Obj:
        """Labels, annotations and taints through the node; capacity and conditions
        through its status (the two a kubelet and NFD/GFD write)."""
        name = node["metadata"]["name"]
        held = self.get("nodes", "", name) or {}
        status = node.get("status") or {}
        if held.get("metadata", {}).get("labels") != node["metadata"].get("labels") or held.get(
            "spec"
        ) != node.get("spec"):
            node = self.api.call("PUT", resource.path("", name), node)
        node = {**node, "status": status}
        updated: Obj = self.api.call("PUT", resource.path("", name, "status"), node)
        return updated

    def delete(self, res: str, ns: str, name: str) -> Obj | None:
        resource = BY_KEY.get(res)
        held = self.get(res, ns, name)
        if resource is None or held is None:
            return super().delete(res, ns, name)
        body: dict[str, Any] = {"kind": "DeleteOptions", "apiVersion": "v1"}
        if res == "pods":
            body.update(gracePeriodSeconds=0, preconditions={"uid": held["metadata"].get("uid")})
        try:
            self.api.call("DELETE", resource.path(ns, name), body)
        except ApiException as exc:
            if exc.status not in (404, 409):
                raise
        return Store.delete(self, res, ns, name)


class _Gone(Exception):
    """The watch's resourceVersion is older than the server keeps: list again."""
