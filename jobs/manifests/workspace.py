"""A workspace's objects (docs/workspaces.md): a Secret for its server's token, a
Deployment of one pod running the workspace image with the owner's home claim, and a
ClusterIP Service. Pure: the caller gives the pod template (``builders._pod_template``).

- The token Secret is stored **without** its value: the apply step fills it in
  (``jobs.selectors.workspace_access.workspace_token``), so the token never appears in the stored
  manifests, the YAML preview or the API.
- One replica, ``Recreate``: the home claim is ReadWriteOnce, and a second pod beside the
  first would hold a second set of GPUs.
- The server answers only requests carrying the token (Jupyter: ``JUPYTER_TOKEN``;
  code-server: ``PASSWORD``), which only the portal's proxy presents; the team's
  NetworkPolicy (``teams.cluster_sync``) admits traffic to workspace pods only from the
  portal's namespace.
"""

from __future__ import annotations

import copy
from typing import Any

from jobs.manifests.context import ManifestContext, WorkspaceContext

Manifest = dict[str, Any]

HOME_VOLUME_NAME = "home"
TOKEN_KEY = "token"  # noqa: S105 - the Secret's key name, not a secret
JUPYTER = "jupyter"
CODE_SERVER = "code-server"
# The variable each server takes its secret from.
TOKEN_ENV = {JUPYTER: "JUPYTER_TOKEN", CODE_SERVER: "PASSWORD"}


def flavor_of(manifests: list[Manifest]) -> str:
    """Which server a workspace's stored manifests run, by the variable its secret is given
    in: a later edit of the image in the admin does not change a workspace already built."""
    for manifest in manifests:
        if manifest.get("kind") != "Deployment":
            continue
        container = manifest["spec"]["template"]["spec"]["containers"][0]
        names = {item.get("name") for item in container.get("env") or [] if "valueFrom" in item}
        for flavor, variable in TOKEN_ENV.items():
            if variable in names:
                return flavor
    return JUPYTER


def token_secret_name(object_name: str) -> str:
    return f"{object_name}-token"


def readiness_path(ws: WorkspaceContext) -> str:
    """A path the server answers without its token once it serves: Jupyter Server's
    ``<base_url>api`` (its version), code-server's ``/healthz``."""
    return f"{ws.base_url}api" if ws.flavor == JUPYTER else "/healthz"


def server_args(ws: WorkspaceContext) -> list[str]:
    """The server's own options: where the portal serves it (Jupyter's ``base_url``; the
    proxy keeps the prefix), and for code-server its address and password auth."""
    if ws.flavor == JUPYTER:
        return [f"--ServerApp.base_url={ws.base_url}", "--ServerApp.quit_button=False"]
    return [
        "--bind-addr",
        f"0.0.0.0:{ws.port}",
        "--auth",
        "password",
        "--disable-telemetry",
        "--disable-update-check",
        f"--abs-proxy-base-path={ws.base_url.rstrip('/')}",
    ]


def token_secret(metadata: dict[str, Any]) -> Manifest:
    meta = {**copy.deepcopy(metadata), "name": token_secret_name(metadata["name"])}
    return {"apiVersion": "v1", "kind": "Secret", "metadata": meta, "type": "Opaque"}


def token_env(ws: WorkspaceContext, object_name: str) -> dict[str, Any]:
    return {
        "name": TOKEN_ENV[ws.flavor],
        "valueFrom": {"secretKeyRef": {"name": token_secret_name(object_name), "key": TOKEN_KEY}},
    }


def container_extras(ws: WorkspaceContext) -> dict[str, Any]:
    """Its port and probes: ready once the server answers; restarted if it stops answering
    for 3 minutes (a kernel busy for hours does not block the server's HTTP)."""
    http_get = {"path": readiness_path(ws), "port": "http"}
    return {
        "ports": [{"name": "http", "containerPort": ws.port, "protocol": "TCP"}],
        "readinessProbe": {"httpGet": dict(http_get), "periodSeconds": 5, "failureThreshold": 3},
        "livenessProbe": {
            "httpGet": dict(http_get),
            "initialDelaySeconds": 60,
            "periodSeconds": 30,
            "timeoutSeconds": 10,
            "failureThreshold": 6,
        },
    }


def with_home(template: dict[str, Any], ws: WorkspaceContext) -> dict[str, Any]:
    """The pod template with the owner's home claim mounted at the image's home path."""
    pod = template["spec"]
    pod.setdefault("volumes", []).insert(
        0, {"name": HOME_VOLUME_NAME, "persistentVolumeClaim": {"claimName": ws.home_claim}}
    )
    container = pod["containers"][0]
    container.setdefault("volumeMounts", []).insert(
        0, {"name": HOME_VOLUME_NAME, "mountPath": ws.home_path}
    )
    return template


def workspace_objects(
    metadata: dict[str, Any],
    template: dict[str, Any],
    ctx: ManifestContext,
    selector: dict[str, str],
) -> list[Manifest]:
    """The Secret, the Deployment and the Service, in apply order."""
    assert ctx.workspace is not None
    ws = ctx.workspace
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": copy.deepcopy(metadata),
        "spec": {
            "replicas": 1,
            "strategy": {"type": "Recreate"},
            "selector": {"matchLabels": dict(selector)},
            "template": with_home(template, ws),
        },
    }
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": copy.deepcopy(metadata),
        "spec": {
            "type": "ClusterIP",
            "selector": dict(selector),
            "ports": [{"name": "http", "protocol": "TCP", "port": ws.port, "targetPort": "http"}],
        },
    }
    return [token_secret(metadata), deployment, service]


def home_claim(
    *, name: str, namespace: str, size: str, labels: dict[str, str], owner: str
) -> Manifest:
    """A member's home folder in the team's namespace (the cluster's default StorageClass):
    created on their first workspace, kept across stops and deletes."""
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": {**labels, "app.kubernetes.io/component": "workspace-home"},
            "annotations": {"gpu-portal.dev/owner": owner},
        },
        "spec": {
            "accessModes": ["ReadWriteOnce"],
            "resources": {"requests": {"storage": size}},
        },
    }
