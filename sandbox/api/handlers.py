"""Route a parsed request to discovery, CRUD, subresources or logs.

``handle`` runs under the store lock and returns (status, body, headers); the HTTP layer
in ``server.py`` only does sockets, auth and JSON.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import yaml

from sandbox import faults, logs
from sandbox.api import discovery, objects, openapi, printing, protobuf, visibility
from sandbox.api.patch import merge_patch
from sandbox.api.resources import BY_PATH, ResourceType
from sandbox.errors import ApiError, bad_request, method_not_allowed, not_found
from sandbox.state import Cluster


@dataclass
class Request:
    method: str
    path: str
    query: dict[str, str]
    body: bytes
    content_type: str
    server_url: str
    accept: str = "application/json"
    user_agent: str = ""

    @property
    def field_manager(self) -> str:
        """The request's ``fieldManager``, else its User-Agent's first word (as the API
        server names a manager that did not say)."""
        return self.query.get("fieldManager") or self.user_agent.split("/")[0] or "unknown"


@dataclass
class Response:
    status: int
    body: Any
    content_type: str = "application/json"
    warnings: list[str] = field(default_factory=list)


@dataclass
class Target:
    rt: ResourceType
    namespace: str | None  # None: all namespaces (namespaced list) or cluster-scoped
    name: str | None
    sub: str | None


def parse_target(path: str) -> tuple[str, str, list[str]] | None:
    """``/apis/batch/v1/namespaces/x/jobs/y`` → ("batch", "v1", [namespaces, x, jobs, y])."""
    parts = [p for p in path.split("/") if p]
    if len(parts) >= 2 and parts[0] == "api":
        return "", parts[1], parts[2:]
    if len(parts) >= 3 and parts[0] == "apis":
        return parts[1], parts[2], parts[3:]
    return None


def resolve(group: str, version: str, rest: list[str]) -> Target:
    def rtype(plural: str) -> ResourceType:
        rt = BY_PATH.get((group, version, plural))
        if rt is None:
            raise ApiError(404, "NotFound", "the server could not find the requested resource", {})
        return rt

    if len(rest) >= 3 and rest[0] == "namespaces":
        rt = rtype(rest[2])
        if not rt.namespaced:
            raise ApiError(404, "NotFound", "the server could not find the requested resource", {})
        return Target(
            rt, rest[1], rest[3] if len(rest) > 3 else None, rest[4] if len(rest) > 4 else None
        )
    if rest:
        rt = rtype(rest[0])
        if rt.namespaced and len(rest) > 1:
            raise ApiError(404, "NotFound", "the server could not find the requested resource", {})
        return Target(
            rt, None, rest[1] if len(rest) > 1 else None, rest[2] if len(rest) > 2 else None
        )
    raise ApiError(404, "NotFound", "the server could not find the requested resource", {})


def not_found_path() -> ApiError:
    return ApiError(404, "NotFound", "the server could not find the requested resource", {})


def _json_body(req: Request) -> Any:
    if "protobuf" in req.content_type:
        return protobuf.decode(req.body)
    try:
        if "yaml" in req.content_type:
            return yaml.safe_load(req.body)
        return json.loads(req.body or b"null")
    except (ValueError, yaml.YAMLError) as exc:
        raise bad_request(f"Object 'Kind' is missing in '{req.body[:80]!r}': {exc}") from None


def handle(cluster: Cluster, req: Request) -> Response:
    path = req.path.rstrip("/") or "/"
    if req.method == "GET":
        doc = _discovery(path, req.server_url)
        if doc is not None:
            return Response(200, doc)
    parsed = parse_target(path)
    if parsed is None:
        raise ApiError(404, "NotFound", "the server could not find the requested resource", {})
    target = resolve(*parsed)
    return _resource(cluster, req, target)


def _discovery(path: str, server: str) -> Any:
    if path.startswith("/openapi/"):
        doc = openapi.document(path)
        if doc is None:
            raise not_found_path()
        return doc
    if path == "/version":
        return discovery.VERSION
    if path == "/api":
        return discovery.api_versions(server)
    if path == "/apis":
        return discovery.api_group_list()
    if path == "/api/v1":
        return discovery.resource_list("", "v1")
    parts = [p for p in path.split("/") if p]
    if len(parts) == 2 and parts[0] == "apis":
        return discovery.api_group(parts[1])
    if len(parts) == 3 and parts[0] == "apis":
        return discovery.resource_list(parts[1], parts[2])
    return None


def _resource(cluster: Cluster, req: Request, t: Target) -> Response:
    rt, q, method = t.rt, req.query, req.method
    ns = t.namespace or ""
    validation = q.get("fieldValidation", "Warn")
    dry_run = bool(q.get("dryRun"))
    if t.sub:
        return _subresource(cluster, req, t)
    as_table = method == "GET" and printing.wants_table(req.accept)
    if t.name is None:
        if as_table:
            listing = objects.list_objects(cluster, rt, t.namespace, q)
            return Response(200, _table(cluster, rt, listing["items"], listing["metadata"], q))
        if method == "GET":
            return Response(200, objects.list_encoded(cluster, rt, t.namespace, q))
        if method == "POST":
            if rt.namespaced and t.namespace is None:
                raise method_not_allowed()
            obj, warnings = objects.create(
                cluster,
                rt,
                ns,
                _json_body(req),
                field_validation=validation,
                dry_run=dry_run,
                manager=req.field_manager,
            )
            return Response(201, obj, warnings=warnings)
        if method == "DELETE":
            listing = objects.list_objects(cluster, rt, t.namespace, q)
            for item in listing["items"]:
                objects.delete(
                    cluster,
                    rt,
                    item["metadata"].get("namespace", ""),
                    item["metadata"]["name"],
                    _delete_options(req),
                )
            return Response(
                200, {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success"}
            )
        raise method_not_allowed()
    if as_table:
        obj = objects.get(cluster, rt, ns, t.name)
        meta = {"resourceVersion": obj["metadata"].get("resourceVersion", "")}
        return Response(200, _table(cluster, rt, [obj], meta, q))
    if method == "GET":
        return Response(200, objects.get(cluster, rt, ns, t.name))
    if method == "PUT":
        obj, warnings = objects.update(
            cluster,
            rt,
            ns,
            t.name,
            _json_body(req),
            field_validation=validation,
            manager=req.field_manager,
        )
        return Response(200, obj, warnings=warnings)
    if method == "PATCH":
        obj, warnings = objects.patch(
            cluster,
            rt,
            ns,
            t.name,
            req.body,
            req.content_type,
            field_validation=validation,
            manager=req.field_manager,
            force=q.get("force", "").lower() == "true",
        )
        return Response(200, obj, warnings=warnings)
    if method == "DELETE":
        obj, warnings = objects.delete(cluster, rt, ns, t.name, _delete_options(req))
        return Response(200, obj, warnings=warnings)
    raise method_not_allowed()


def _table(
    cluster: Cluster, rt: ResourceType, items: list[Any], meta: dict[str, Any], q: dict[str, str]
) -> dict[str, Any]:
    return printing.table(
        rt, items, meta, now=cluster.wall_now(), include=q.get("includeObject", "Metadata")
    )


def _delete_options(req: Request) -> dict[str, Any]:
    opts: dict[str, Any] = {}
    if req.body:
        body = _json_body(req)
        if isinstance(body, dict):
            opts.update(body)
    for key in ("propagationPolicy", "gracePeriodSeconds", "orphanDependents"):
        if key in req.query:
            value: Any = req.query[key]
            if key == "gracePeriodSeconds":
                value = int(value)
            elif key == "orphanDependents":
                value = value.lower() == "true"
            opts[key] = value
    return opts


def _evict(cluster: Cluster, req: Request, t: Target) -> Response:
    """``POST pods/<name>/eviction`` with a ``policy/v1`` ``Eviction`` (``kubectl drain``):
    the pod is deleted gracefully, as the eviction API does when no PodDisruptionBudget
    stands in the way (the sandbox serves none)."""
    if req.method != "POST":
        raise method_not_allowed()
    body = _json_body(req)
    if not isinstance(body, dict) or body.get("kind") != "Eviction":
        raise bad_request("the body of the request was in an unknown format - expected Eviction")
    if (body.get("metadata") or {}).get("name") not in (None, t.name):
        raise bad_request("name in URL does not match name in Eviction object")
    options = dict(body.get("deleteOptions") or {})
    objects.delete(cluster, t.rt, t.namespace or "", t.name or "", options)
    return Response(
        201,
        {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201},
    )


def _subresource(cluster: Cluster, req: Request, t: Target) -> Response:
    rt, ns, name, sub = t.rt, t.namespace or "", t.name or "", t.sub
    if sub not in rt.subresources:
        raise ApiError(404, "NotFound", "the server could not find the requested resource", {})
    if sub == "log":
        if req.method != "GET":
            raise method_not_allowed()
        return Response(200, pod_log(cluster, ns, name, req.query), "text/plain")
    if sub == "eviction":
        return _evict(cluster, req, t)
    if sub == "pendingworkloads":
        if req.method != "GET":
            raise method_not_allowed()
        return Response(200, visibility.pending_workloads(cluster, t.rt, ns, name, req.query))
    if sub == "status":
        if req.method == "GET":
            return Response(200, objects.get(cluster, rt, ns, name))
        if req.method == "PUT":
            obj, warnings = objects.update(cluster, rt, ns, name, _json_body(req), status_only=True)
            return Response(200, obj, warnings=warnings)
        if req.method == "PATCH":
            obj, warnings = objects.patch(
                cluster, rt, ns, name, req.body, req.content_type, status_only=True
            )
            return Response(200, obj, warnings=warnings)
        raise method_not_allowed()
    if sub == "scale":
        obj = objects.get(cluster, rt, ns, name)
        if req.method in ("PUT", "PATCH"):
            body = _json_body(req) if req.method == "PUT" else None
            if req.method == "PATCH":
                body = merge_patch(_scale(obj), _json_body(req))
            replicas = ((body or {}).get("spec") or {}).get("replicas")
            if not isinstance(replicas, int):
                raise bad_request("spec.replicas must be an integer")
            patch_body = json.dumps({"spec": {"replicas": replicas}}).encode()
            obj, _ = objects.patch(
                cluster, rt, ns, name, patch_body, "application/merge-patch+json"
            )
        elif req.method != "GET":
            raise method_not_allowed()
        return Response(200, _scale(obj))
    raise method_not_allowed()


def _scale(obj: dict[str, Any]) -> dict[str, Any]:
    meta = obj["metadata"]
    labels = (obj["spec"].get("selector") or {}).get("matchLabels") or {}
    return {
        "kind": "Scale",
        "apiVersion": "autoscaling/v1",
        "metadata": {
            k: meta[k]
            for k in ("name", "namespace", "uid", "resourceVersion", "creationTimestamp")
            if k in meta
        },
        "spec": {"replicas": obj["spec"].get("replicas", 0)},
        "status": {
            "replicas": obj.get("status", {}).get("replicas", 0),
            "selector": ",".join(f"{k}={v}" for k, v in sorted(labels.items())),
        },
    }


def _tail(text: str, tail_lines: str) -> str:
    """The last ``tail_lines`` lines of a log (all of it when not a count)."""
    output = text.splitlines()
    if tail_lines.isdigit():
        output = output[-int(tail_lines) :] if int(tail_lines) else []
    return "".join(line + "\n" for line in output)


def _kept_log(
    cluster: Cluster, pod: dict[str, Any], life: dict[str, Any], q: dict[str, str]
) -> str | None:
    """A log kept as text rather than generated: the MIG manager's (what it did with the
    node's ``nvidia.com/mig.config``) or a real server's own output (``sandbox.servers``)."""
    node = pod["spec"].get("nodeName")
    if (pod["metadata"].get("labels") or {}).get("app") == "nvidia-mig-manager" and node:
        return _mig_manager_log(cluster, node, q)
    real = cluster.servers.log_text(pod["metadata"]["uid"]) if life.get("real") else None
    return None if real is None else _tail(real, q.get("tailLines") or "")


def _mig_manager_log(cluster: Cluster, node: str, q: dict[str, str]) -> str:
    logged = cluster.store.meta_get(f"miglog/{node}") or []
    text = logs.format_lines(
        [(cluster.clock.wall(t), line) for t, line in logged],
        q.get("timestamps", "").lower() == "true",
    )
    return _tail(text, q.get("tailLines") or "")


def pod_log(cluster: Cluster, ns: str, name: str, q: dict[str, str]) -> str:
    """``GET …/pods/<name>/log`` with ``container``, ``tailLines``, ``timestamps``,
    ``sinceSeconds``/``sinceTime``, ``limitBytes`` and ``previous``."""
    pod = cluster.store.get("pods", ns, name)
    if pod is None:
        raise not_found("pods", "", name)
    containers = [c["name"] for c in pod["spec"].get("containers") or []]
    container = q.get("container")
    if not container:
        if len(containers) > 1:
            raise bad_request(
                f"a container name must be specified for pod {name}, choose one of: "
                f"[{' '.join(containers)}]"
            )
        container = containers[0]
    if container not in containers:
        raise bad_request(f"container {container} is not valid for pod {name}")
    node = pod["spec"].get("nodeName")
    if node and faults.node_down(cluster, node):
        # The API server proxies logs from the node's kubelet, which is gone.
        host = (pod.get("status") or {}).get("hostIP") or node
        raise ApiError(
            500,
            "InternalError",
            f'Get "https://{host}:10250/containerLogs/{ns}/{name}/{container}": '
            f"dial tcp {host}:10250: connect: no route to host",
        )
    life = cluster.store.meta_get(f"life/{pod['metadata']['uid']}")
    if not life or life.get("started") is None:
        reason = "ContainerCreating"
        raise bad_request(f'container "{container}" in pod "{name}" is waiting to start: {reason}')
    if q.get("previous", "").lower() == "true" and not life.get("restarts"):
        raise bad_request(f'previous terminated container "{container}" in pod "{name}" not found')
    kept = _kept_log(cluster, pod, life, q)
    if kept is not None:
        return kept
    spec_c = next(c for c in pod["spec"]["containers"] if c["name"] == container)
    env: dict[str, str] = {}
    annotations = pod["metadata"].get("annotations") or {}
    for e in spec_c.get("env") or []:
        if "value" in e:
            env[e["name"]] = str(e["value"])
        else:
            path = ((e.get("valueFrom") or {}).get("fieldRef") or {}).get("fieldPath", "")
            if path.startswith("metadata.annotations['"):
                env[e["name"]] = str(annotations.get(path[len("metadata.annotations['") : -2], ""))
    port = next((p.get("containerPort") for p in spec_c.get("ports") or []), 8080)
    finished = life.get("finished") if life.get("state") in ("done", "backoff") else None
    tl = logs.Timeline(
        kind=life.get("kind", "training"),
        started=float(life["started"]),
        finished=float(finished) if finished is not None else None,
        duration=float(life.get("duration", 60)),
        exit_code=int(life.get("exit", 0)),
        image=str(spec_c.get("image", "")),
        gpus=list(life.get("devices") or []),
        env=env,
        port=int(port),
        seed=f"{cluster.options.seed}/{pod['metadata']['uid']}/{container}",
        xid=int(life["xid"]) if life.get("xid") is not None else None,
        planned=float(life["planned"]) if life.get("planned") else None,
        resume_step=int(life.get("resume_step", 0)),
    )
    since: float | None = None
    if q.get("sinceSeconds"):
        since = cluster.now() - float(q["sinceSeconds"])
    elif q.get("sinceTime"):
        since = cluster.sim_time(q["sinceTime"])
    tail = int(q["tailLines"]) if q.get("tailLines") not in (None, "") else None
    if tail is not None and tail < 0:
        tail = None
    lines = logs.render(tl, cluster.now(), tail, since)
    if tail is not None:
        lines = lines[-tail:] if tail else []
    # Lines are stamped on the wall clock, as the API's timestamps are.
    lines = [(cluster.clock.wall(t), text) for t, text in lines]
    text = logs.format_lines(lines, q.get("timestamps", "").lower() == "true")
    if q.get("limitBytes"):
        text = text.encode()[: int(q["limitBytes"])].decode(errors="ignore")
    return text
