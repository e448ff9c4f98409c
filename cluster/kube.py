"""The one adapter between the portal and Kubernetes (a real cluster or the sandbox).

Built on the official ``kubernetes`` client and working on plain dicts exactly
as the API server sends them (camelCase). Every call has a timeout. Errors are
mapped to two types a caller can act on:

- ``TemporaryClusterError``: 5xx, 429, timeouts, refused connections; retry
  with backoff.
- ``PermanentClusterError``: the API server refused the request (400/422
  invalid, 403 forbidden, 404 …); retrying cannot help.
- ``ClusterCredentialsRefused``: 401, the portal's credentials are wrong or expired; an
  operator must fix them. Not retried, and not held against the job. ``QuotaRefused`` is
  the ResourceQuota admission refusal ("exceeded quota"), which waits for quota.

Create is idempotent: 409 AlreadyExists on an object carrying the same portal
job label counts as success; 404 on delete means "already gone".
"""

from __future__ import annotations

import contextlib
import contextvars
import json
import logging
import os
import re
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import orjson
import urllib3
from django.conf import settings
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException

from cluster.access import ClusterAccess

logger = logging.getLogger(__name__)

Obj = dict[str, Any]

LIST_PAGE_SIZE = 500


class ClusterError(Exception):
    def __init__(self, message: str, *, status: int | None = None, reason: str = "") -> None:
        super().__init__(message)
        self.message = message
        self.status = status
        self.reason = reason


class TemporaryClusterError(ClusterError):
    """Worth retrying: the cluster is down, slow, overloaded or restarting."""


class PermanentClusterError(ClusterError):
    """The API server refused the request; the same request will be refused again."""


class ClusterCredentialsRefused(ClusterError):
    """401: the API server does not accept the portal's credentials. A configuration error
    for an operator to fix, reported as such: not an outage to retry with backoff, and not
    the job's fault either (work waiting on it stays queued and is picked up again)."""


class QuotaRefused(PermanentClusterError):
    """ResourceQuota admission: the namespace's quota is used up (waits, not fails)."""


class ObjectNotFound(PermanentClusterError):
    """404: the object (or its namespace) does not exist."""


class ObjectConflict(PermanentClusterError):
    """409: AlreadyExists on create, or a stale resourceVersion on update."""


@dataclass(frozen=True)
class Kind:
    """How to reach one kind of object through the typed client (a custom resource: through
    ``CustomObjectsApi``, by its group, version and plural)."""

    api: Callable[[client.ApiClient], Any]
    plural: str  # method-name stem, e.g. "job" → create_namespaced_job; a CRD's plural
    namespaced: bool = True
    group_version: tuple[str, str] | None = None  # a custom resource's (group, version)


def _kueue(plural: str, *, namespaced: bool) -> Kind:
    return Kind(client.CustomObjectsApi, plural, namespaced, ("kueue.x-k8s.io", "v1beta2"))


KINDS: dict[str, Kind] = {
    "Namespace": Kind(client.CoreV1Api, "namespace", namespaced=False),
    "Node": Kind(client.CoreV1Api, "node", namespaced=False),
    "Pod": Kind(client.CoreV1Api, "pod"),
    "Service": Kind(client.CoreV1Api, "service"),
    "Event": Kind(client.CoreV1Api, "event"),
    "ResourceQuota": Kind(client.CoreV1Api, "resource_quota"),
    "LimitRange": Kind(client.CoreV1Api, "limit_range"),
    "ServiceAccount": Kind(client.CoreV1Api, "service_account"),
    "Secret": Kind(client.CoreV1Api, "secret"),
    "PersistentVolumeClaim": Kind(client.CoreV1Api, "persistent_volume_claim"),
    "Job": Kind(client.BatchV1Api, "job"),
    "Deployment": Kind(client.AppsV1Api, "deployment"),
    "PriorityClass": Kind(client.SchedulingV1Api, "priority_class", namespaced=False),
    "Lease": Kind(client.CoordinationV1Api, "lease"),
    "NetworkPolicy": Kind(client.NetworkingV1Api, "network_policy"),
    "ConfigMap": Kind(client.CoreV1Api, "config_map"),
    # NVIDIA's GPU Operator, where the cluster runs it
    "ClusterPolicy": Kind(client.CustomObjectsApi, "clusterpolicies", False, ("nvidia.com", "v1")),
    # Kueue's API, where the cluster runs Kueue (QUEUEING-NOTES: v1beta2 is its storage version)
    "ResourceFlavor": _kueue("resourceflavors", namespaced=False),
    "ClusterQueue": _kueue("clusterqueues", namespaced=False),
    "LocalQueue": _kueue("localqueues", namespaced=True),
    "Workload": _kueue("workloads", namespaced=True),
    "WorkloadPriorityClass": _kueue("workloadpriorityclasses", namespaced=False),
    # Kubeflow's training operator (v1), where the cluster runs it
    "PyTorchJob": Kind(client.CustomObjectsApi, "pytorchjobs", True, ("kubeflow.org", "v1")),
    # Kubeflow Trainer v2, where the cluster runs it
    "TrainJob": Kind(
        client.CustomObjectsApi, "trainjobs", True, ("trainer.kubeflow.org", "v1alpha1")
    ),
    "ClusterTrainingRuntime": Kind(
        client.CustomObjectsApi,
        "clustertrainingruntimes",
        False,
        ("trainer.kubeflow.org", "v1alpha1"),
    ),
}


_target: contextvars.ContextVar[ClusterAccess | None] = contextvars.ContextVar(
    "kube_cluster", default=None
)
_local = threading.local()
_config_lock = threading.Lock()


@contextlib.contextmanager
def on_cluster(access: ClusterAccess) -> Iterator[None]:
    """Every call of this adapter inside the block goes to ``access``'s cluster (in this
    thread or task); outside any block, to the first cluster (the portal's settings)."""
    token = _target.set(access)
    try:
        yield
    finally:
        _target.reset(token)


def current_cluster() -> ClusterAccess:
    return _target.get() or ClusterAccess(settings.CLUSTER_NAME)


def cluster_key() -> tuple[str, str, str, bool]:
    """What identifies the current cluster, for caches kept per cluster."""
    access = current_cluster()
    return (access.name, *access.resolved())


def _load_configuration(kubeconfig: str, context: str, in_cluster: bool) -> client.Configuration:
    configuration = client.Configuration()
    if in_cluster:
        config.load_incluster_config(client_configuration=configuration)
    else:
        config.load_kube_config(
            config_file=kubeconfig or None,
            context=context or None,
            client_configuration=configuration,
        )
    # The client must not retry on its own: retries are the caller's decision.
    configuration.retries = False
    return configuration


def api_client() -> client.ApiClient:
    """The current cluster's client (and its connection pool), one per process, thread and
    cluster.

    Keyed by pid so that a Celery prefork child never shares the parent's
    sockets, and by thread because urllib3 pools are not fork-safe.
    """
    access = current_cluster()
    kubeconfig, context, in_cluster = access.resolved()
    if getattr(_local, "pid", None) != os.getpid() or _local.clients is None:
        _local.pid, _local.clients = os.getpid(), {}
    clients: dict[tuple[str, str, str, bool], client.ApiClient] = _local.clients
    key = (access.name, kubeconfig, context, in_cluster)
    found = clients.get(key)
    if found is None:
        with _config_lock:
            try:
                configuration = _load_configuration(kubeconfig, context, in_cluster)
            except (config.ConfigException, OSError, TypeError) as exc:
                why = str(exc).rstrip(".")
                raise PermanentClusterError(
                    f"No cluster configured: {why}. Set KUBECONFIG (and KUBE_CONTEXT) or "
                    "KUBE_IN_CLUSTER=true."
                    if access.access == "settings"
                    else f"Cluster {access.name}: no configuration to reach it: {why}. Check "
                    "its kubeconfig in the admin's Clusters."
                ) from exc
        found = clients[key] = client.ApiClient(configuration)
    return found


def reset_client() -> None:
    """Forget the cached clients (tests switch clusters; settings changed)."""
    _local.clients = None


def _status_body(exc: ApiException) -> Obj:
    try:
        body = json.loads(exc.body or "{}")
    except (TypeError, ValueError):
        return {}
    return body if isinstance(body, dict) else {}


def _map_api_exception(exc: ApiException) -> ClusterError:
    status = exc.status or 0
    body = _status_body(exc)
    message = body.get("message") or exc.reason or f"HTTP {status}"
    reason = body.get("reason") or ""
    if status == 0 or status == 429 or status >= 500:
        return TemporaryClusterError(message, status=status, reason=reason)
    if status == 403 and "exceeded quota" in message:
        return QuotaRefused(message, status=status, reason=reason)
    if status == 404:
        return ObjectNotFound(message, status=status, reason=reason)
    if status == 409:
        return ObjectConflict(message, status=status, reason=reason)
    if status == 401:
        # A configuration error to report, not an outage to retry: the same credentials
        # will be refused again until an operator fixes them. The cached client goes, so
        # renewed credentials (a rotated token file) are read at the next call.
        reset_client()
        return ClusterCredentialsRefused(
            f"Unauthorized by the API server ({message}); check the kubeconfig credentials.",
            status=status,
            reason=reason,
        )
    return PermanentClusterError(message, status=status, reason=reason)


# urllib3 names the connection object in its words ("<urllib3.connection.HTTPSConnection
# object at 0x7f2d…>: Failed to establish…"): nothing a reader of the cluster page can use.
_OBJECT_REPR = re.compile(r"<[\w.]+ object at 0x[0-9a-f]+>:?\s*")


def _unreachable(exc: Exception) -> TemporaryClusterError:
    """A connection that failed, in words an operator can act on: the address the client
    tried and why (``Cluster unreachable: 10.0.0.5:6443: Failed to establish a new
    connection: [Errno 111] Connection refused``)."""
    cause = getattr(exc, "reason", None) or exc  # MaxRetryError keeps the last attempt's
    words = _OBJECT_REPR.sub("", str(cause)).strip()
    # The connection (NewConnectionError, the client making no retries) or its pool.
    peer: Any = getattr(cause, "conn", None) or getattr(exc, "pool", None)
    host, port = getattr(peer, "host", None), getattr(peer, "port", None)
    where = f"{host}:{port}: " if host else ""
    return TemporaryClusterError(f"Cluster unreachable: {where}{words}")


def _call(method: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """Call one client method with a timeout, returning the decoded JSON body."""
    kwargs.setdefault("_request_timeout", settings.KUBE_REQUEST_TIMEOUT)
    kwargs.setdefault("_preload_content", False)
    try:
        response = method(*args, **kwargs)
    except ApiException as exc:
        raise _map_api_exception(exc) from exc
    except (urllib3.exceptions.HTTPError, OSError) as exc:
        raise _unreachable(exc) from exc
    data = response.data if hasattr(response, "data") else response
    if isinstance(data, bytes | bytearray):
        try:
            return orjson.loads(data) if data else {}
        except orjson.JSONDecodeError:
            pass  # not JSON (plain text) or beyond orjson (integers over 64 bits)
        text = data.decode("utf-8", errors="replace")
        try:
            return json.loads(text) if text else {}
        except ValueError:
            return text
    return data


def _method(kind: str, verb: str, *, all_namespaces: bool = False) -> Callable[..., Any]:
    spec = KINDS[kind]
    api = spec.api(api_client())
    if spec.group_version is not None:
        return _custom_method(api, spec, verb, all_namespaces=all_namespaces)
    if verb == "list" and all_namespaces and spec.namespaced:
        return getattr(api, f"list_{spec.plural}_for_all_namespaces")
    scope = "namespaced_" if spec.namespaced else ""
    return getattr(api, f"{verb}_{scope}{spec.plural}")


def _custom_method(api: Any, spec: Kind, verb: str, *, all_namespaces: bool) -> Callable[..., Any]:
    """A ``CustomObjectsApi`` method with the typed methods' argument order (name first,
    then the namespace, then the body), so every function here calls both kinds alike."""
    assert spec.group_version is not None
    group, version = spec.group_version
    scope = "namespaced" if spec.namespaced and not all_namespaces else "cluster"
    method = getattr(api, f"{'get' if verb == 'read' else verb}_{scope}_custom_object")
    path = (group, version)

    def call(*args: Any, **kwargs: Any) -> Any:
        if verb in ("read", "replace", "delete", "patch"):
            name, rest = args[0], args[1:]
            where = (rest[0],) if scope == "namespaced" else ()
            body = rest[len(where) :]
            return method(*path, *where, spec.plural, name, *body, **kwargs)
        where = (args[0],) if scope == "namespaced" else ()
        return method(*path, *where, spec.plural, *args[len(where) :], **kwargs)

    return call


def _ns_args(kind: str, namespace: str | None) -> tuple[Any, ...]:
    return (namespace,) if KINDS[kind].namespaced else ()


def get(kind: str, name: str, namespace: str | None = None) -> Obj:
    return _call(_method(kind, "read"), name, *_ns_args(kind, namespace))


def create(manifest: Obj) -> Obj:
    kind, namespace = manifest["kind"], manifest["metadata"].get("namespace")
    return _call(_method(kind, "create"), *_ns_args(kind, namespace), manifest)


def replace(manifest: Obj) -> Obj:
    kind, meta = manifest["kind"], manifest["metadata"]
    return _call(
        _method(kind, "replace"), meta["name"], *_ns_args(kind, meta.get("namespace")), manifest
    )


def cordon(node: str, *, unschedulable: bool = True) -> Obj:
    """Mark a node unschedulable, as ``kubectl cordon`` does (its running pods stay), or
    schedulable again (``kubectl uncordon``)."""
    body = {"spec": {"unschedulable": unschedulable or None}}
    return _call(client.CoreV1Api(api_client()).patch_node, node, body)


def label_node(node: str, labels: dict[str, str | None]) -> Obj:
    """Set (or, with None, remove) node labels, as ``kubectl label node --overwrite`` does:
    a merge patch of ``metadata.labels``."""
    return _call(client.CoreV1Api(api_client()).patch_node, node, {"metadata": {"labels": labels}})


def scale(kind: str, name: str, namespace: str, replicas: int) -> Obj:
    """Set a workload's replicas through its ``scale`` subresource: a PUT of a ``Scale``, as
    ``kubectl scale`` and autoscalers do, so no patch format needs agreeing on."""
    spec = KINDS[kind]
    method = getattr(spec.api(api_client()), f"replace_namespaced_{spec.plural}_scale")
    body = {
        "apiVersion": "autoscaling/v1",
        "kind": "Scale",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"replicas": replicas},
    }
    return _call(method, name, namespace, body)


def create_idempotent(manifest: Obj, *, owner_label: str) -> tuple[Obj, bool]:
    """Create ``manifest``; if it already exists and carries the same ``owner_label`` value,
    return the existing object. Returns (object, created)."""
    try:
        return create(manifest), True
    except ObjectConflict:
        meta = manifest["metadata"]
        existing = get(manifest["kind"], meta["name"], meta.get("namespace"))
        want = meta.get("labels", {}).get(owner_label)
        have = existing.get("metadata", {}).get("labels", {}).get(owner_label)
        if want is not None and have == want:
            return existing, False
        raise PermanentClusterError(
            f"{manifest['kind']} {meta.get('namespace', '')}/{meta['name']} already exists and "
            "was not created by this job; delete it or rename the job.",
            status=409,
            reason="AlreadyExists",
        ) from None


def delete(
    kind: str,
    name: str,
    namespace: str | None = None,
    *,
    propagation: str = "Background",
    grace_period_seconds: int | None = None,
) -> bool:
    """Delete an object; returns False when it was already gone. ``grace_period_seconds=0``
    on a pod removes it at once, without the kubelet's confirmation (``kubectl delete
    --force --grace-period=0``)."""
    body: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "DeleteOptions",
        "propagationPolicy": propagation,
    }
    if grace_period_seconds is not None:
        body["gracePeriodSeconds"] = grace_period_seconds
    try:
        _call(_method(kind, "delete"), name, *_ns_args(kind, namespace), body=body)
    except ObjectNotFound:
        return False
    return True


def list_all(
    kind: str,
    *,
    namespace: str | None = None,
    label_selector: str | None = None,
    field_selector: str | None = None,
) -> Iterator[Obj]:
    """Every object of a kind, page by page (``limit``/``continue``), from the cluster
    current at the call (not at the first page read: see ``on_cluster``).

    A continue token that expired mid-list (410 Gone) restarts the list: a
    consistent snapshot matters more than the pages already read.
    """
    kwargs: dict[str, Any] = {"limit": LIST_PAGE_SIZE}
    if label_selector:
        kwargs["label_selector"] = label_selector
    if field_selector:
        kwargs["field_selector"] = field_selector
    method = _method(kind, "list", all_namespaces=namespace is None)
    args = _ns_args(kind, namespace) if namespace is not None else ()
    return _pages(method, args, kwargs)


def _pages(
    method: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]
) -> Iterator[Obj]:
    token: str | None = None
    restarts = 0
    while True:
        try:
            page = (
                _call(method, *args, _continue=token, **kwargs)
                if token
                else _call(method, *args, **kwargs)
            )
        except PermanentClusterError as exc:
            if exc.status == 410 and token and restarts < 3:
                token, restarts = None, restarts + 1
                continue
            raise
        yield from page.get("items") or []
        token = (page.get("metadata") or {}).get("continue") or None
        if not token:
            return


class WatchExpired(PermanentClusterError):
    """The version a watch asked for is older than the API server keeps (410 Gone): the
    caller lists again and watches from the list's version."""


def list_with_version(
    kind: str, *, label_selector: str | None = None, namespace: str | None = None
) -> tuple[list[Obj], str]:
    """Every object of a kind (paged) and the collection's resourceVersion to watch from.

    Every page carries the version of the snapshot it was served from; the first page's
    is the one a watch resumes at, so nothing that changed while paging is missed (a
    later page may already hold a newer copy of an object: the watch brings it again)."""
    kwargs: dict[str, Any] = {"limit": LIST_PAGE_SIZE}
    if label_selector:
        kwargs["label_selector"] = label_selector
    method = _method(kind, "list", all_namespaces=namespace is None)
    args = _ns_args(kind, namespace) if namespace is not None else ()
    items: list[Obj] = []
    version = ""
    token: str | None = None
    while True:
        page = (
            _call(method, *args, _continue=token, **kwargs)
            if token
            else _call(method, *args, **kwargs)
        )
        metadata = page.get("metadata") or {}
        version = version or str(metadata.get("resourceVersion") or "")
        items.extend(page.get("items") or [])
        token = metadata.get("continue") or None
        if not token:
            return items, version


def watch(
    kind: str,
    *,
    resource_version: str,
    label_selector: str | None = None,
    timeout_seconds: int = 300,
) -> Iterator[tuple[str, Obj]]:
    """Follow changes of a kind (all namespaces) from ``resource_version``: yields (type,
    object) for ADDED / MODIFIED / DELETED and BOOKMARK (bookmarks asked for), until the
    server ends the stream (``timeout_seconds``) or the connection drops
    (``TemporaryClusterError``). A version the server no longer keeps raises
    ``WatchExpired``: list again."""
    kwargs: dict[str, Any] = {
        "watch": True,
        "resource_version": resource_version,
        "allow_watch_bookmarks": True,
        "timeout_seconds": timeout_seconds,
        # The read timeout covers the silence between events: bookmarks arrive well
        # within it; the connect timeout stays the usual one.
        "_request_timeout": (settings.KUBE_REQUEST_TIMEOUT, timeout_seconds + 30),
        "_preload_content": False,
    }
    if label_selector:
        kwargs["label_selector"] = label_selector
    method = _method(kind, "list", all_namespaces=True)
    try:
        response = method(**kwargs)
    except ApiException as exc:
        error = _map_api_exception(exc)
        if error.status == 410:
            raise WatchExpired(error.message, status=410, reason="Expired") from exc
        raise error from exc
    except (urllib3.exceptions.HTTPError, OSError) as exc:
        raise _unreachable(exc) from exc
    try:
        buffer = b""
        for chunk in response.stream(amt=None, decode_content=False):
            buffer += chunk
            *lines, buffer = buffer.split(b"\n")
            for line in lines:
                if not line.strip():
                    continue
                event = orjson.loads(line)
                kind_of_event, obj = event.get("type"), event.get("object") or {}
                if kind_of_event == "ERROR":
                    code = int(obj.get("code") or 0)
                    message = str(obj.get("message") or "watch error")
                    if code == 410:
                        raise WatchExpired(message, status=410, reason="Expired")
                    raise TemporaryClusterError(message, status=code)
                yield str(kind_of_event), obj
    except (urllib3.exceptions.HTTPError, OSError) as exc:
        raise TemporaryClusterError(f"Watch interrupted: {exc}") from exc
    finally:
        response.release_conn()


def pod_log(name: str, namespace: str, *, tail_lines: int = 200, timestamps: bool = False) -> str:
    """The last lines of a pod's log; ``timestamps``: each line starts with its RFC 3339
    time, as ``kubectl logs --timestamps`` shows it."""
    text = _call(
        client.CoreV1Api(api_client()).read_namespaced_pod_log,
        name,
        namespace,
        tail_lines=tail_lines,
        timestamps=timestamps,
    )
    return text if isinstance(text, str) else json.dumps(text)


VISIBILITY = "/apis/visibility.kueue.x-k8s.io/v1beta2"


def pending_workloads(namespace: str, local_queue: str, *, limit: int = 1000) -> list[Obj]:
    """Kueue's visibility API: a LocalQueue's pending Workloads in the order Kueue will
    consider them, each with ``positionInClusterQueue`` and ``positionInLocalQueue``
    (0-based). An aggregated API, not a resource: the client has no typed method for it."""

    def get(**kwargs: Any) -> Any:
        return api_client().call_api(
            VISIBILITY + "/namespaces/{namespace}/localqueues/{name}/pendingworkloads",
            "GET",
            path_params={"namespace": namespace, "name": local_queue},
            query_params=[("limit", limit)],
            header_params={"Accept": "application/json"},
            auth_settings=["BearerToken"],
            _return_http_data_only=True,
            **kwargs,
        )

    return list(_call(get).get("items") or [])


def served_resources(group: str, version: str) -> set[str]:
    """The resources (plurals) the API server serves in ``group/version`` (discovery); empty
    when it does not serve the group version at all (404)."""

    def get(**kwargs: Any) -> Any:
        return api_client().call_api(
            "/apis/{group}/{version}",
            "GET",
            path_params={"group": group, "version": version},
            header_params={"Accept": "application/json"},
            auth_settings=["BearerToken"],
            _return_http_data_only=True,
            response_type="object",
            **kwargs,
        )

    try:
        found = _call(get)
    except ObjectNotFound:
        return set()
    return {str(r.get("name")) for r in (found or {}).get("resources") or []}


def version(*, timeout: float | None = None) -> Obj:
    """The API server's version (``/version``): the cheapest call that proves it answers."""
    return _call(
        client.VersionApi(api_client()).get_code,
        _request_timeout=settings.KUBE_REQUEST_TIMEOUT if timeout is None else timeout,
    )


# A replace refused for a stale resourceVersion is read and tried again this many times
# (client-go's RetryOnConflict): a ResourceQuota's status, say, changes under us all the time.
CONFLICT_TRIES = 5


def ensure(manifest: Obj, *, compare: Callable[[Obj, Obj], bool]) -> str:
    """Make the object match ``manifest``: create it, or replace it when ``compare`` says it
    differs. Returns ``created``, ``updated`` or ``unchanged`` (safe to run again and again).
    A replace that loses a race to another writer (409 Conflict) is compared again on the
    object as it now is and retried."""
    meta = manifest["metadata"]
    kind, name, namespace = manifest["kind"], meta["name"], meta.get("namespace")
    try:
        existing = get(kind, name, namespace)
    except ObjectNotFound:
        try:
            create(manifest)
            return "created"
        except ObjectConflict:  # created concurrently: fall through and compare
            existing = get(kind, name, namespace)
    tries = 1
    while not compare(existing, manifest):
        version = existing["metadata"].get("resourceVersion")
        try:
            replace({**manifest, "metadata": {**meta, "resourceVersion": version}})
            return "updated"
        except ObjectConflict:
            if tries == CONFLICT_TRIES:
                raise
            tries += 1
            existing = get(kind, name, namespace)
    return "unchanged"
