"""GPUs that fail like real hardware (fault injection, outside the Kubernetes API).

``POST /sandbox/faults`` on the nodes' metrics port (the cluster's bearer token; the
kubeconfig names it) or ``python -m sandbox fault``:

- ``{"node": N, "gpu": 5, "xid": 79}``: GPU 5 of node N reports the XID error. dcgm-exporter
  then shows the code in ``DCGM_FI_DEV_XID_ERRORS`` for every device of that GPU (an ECC
  error — 48, 94, 95 — also moves ``DCGM_FI_DEV_ECC_DBE_VOL_TOTAL``); the device plugin marks
  it unhealthy, so the node's allocatable GPU resources drop by what the GPU offered while
  its capacity stays; and every container using it exits with a failure whose log ends the
  way a CUDA program's does. Nothing is assigned the GPU until it is repaired.
- ``{"node": N, "down": true}``: the node's kubelet stops (no Lease renewals, its pods
  frozen, its exporter unreachable): the real node-lifecycle controller marks it
  ``Unknown``, taints it unreachable and evicts its pods after their toleration;
  ``"down": false`` brings it back.
- ``{"node": N, "gpu": 5, "repair": true}``: healthy again (allocatable restored; the last
  XID stays in the exporter, as it does until the driver is reloaded, and the ECC count).
- ``{"node": N, "gpu": 5, "host_client": "Xorg"}``: a process outside Kubernetes holds the
  GPU; pods do not notice, but the MIG manager cannot re-partition it (its change fails,
  as nvidia-smi refuses a GPU in use); ``"host_client": ""`` when the process has exited.

``GET /sandbox/faults/log``: every fault and repair so far (wall-clock ``at``, the node, GPU,
XID or ``down``, and the pods it struck), for soak runs to measure recovery from.

Deterministic: a fault happens when it is asked for, nothing is random (a profile's
``faults`` section asks at a seeded rate: ``sandbox.nodes.faultplan``).
"""

from __future__ import annotations

import json
import sys
from typing import Any

from sandbox import checkpoints
from sandbox.errors import ApiError
from sandbox.state import Cluster

# The kubeconfig extension that names where a local cluster's nodes take faults (with the
# real control plane the API server knows nothing of them: the node simulation takes them).
FAULTS_EXTENSION = "gpu-portal.dev/local-cluster"

# The XID codes a fault may name, in NVIDIA's words.
XID_MEANINGS: dict[int, str] = {
    48: "double-bit ECC error",
    74: "NVLink error",
    79: "GPU has fallen off the bus",
    94: "contained ECC error",
    95: "uncontained ECC error",
}
ECC_XIDS = frozenset({48, 94, 95})
# Every fault and repair, in order (``GET /sandbox/faults/log``): when (wall clock), what,
# and the pods it struck (``namespace/name``), for soak runs to measure recovery from.
LOG = "faultlog"
LOG_KEPT = 10_000
# How the program using the GPU ends (an uncaught CUDA error in Python exits with 1; its
# last log lines are sandbox.logs.CUDA_ERRORS').
FAILED_EXIT_CODE = 1


def _key(node: str, gpu: int) -> str:
    return f"fault/{node}/{gpu}"


def gpu_fault(cluster: Cluster, node: str, gpu: int) -> dict[str, Any] | None:
    """The fault of one physical GPU (``xid``, ``at``, ``healthy``, ``ecc_dbe``), if any."""
    found = cluster.store.meta_get(_key(node, gpu))
    return dict(found) if isinstance(found, dict) else None


def unhealthy_devices(cluster: Cluster, node: str) -> set[str]:
    """Device ids (GPUs and their MIG instances) of the node's unhealthy GPUs."""
    bad = {
        gpu
        for gpu in {d.gpu for d in cluster.devices(node)}
        if (gpu_fault(cluster, node, gpu) or {}).get("healthy") is False
    }
    return {d.id for d in cluster.devices(node) if d.gpu in bad}


def _bad_request(message: str) -> ApiError:
    return ApiError(400, "BadRequest", message)


def _offered(cluster: Cluster, node: str, gpu: int) -> dict[str, int]:
    """What one physical GPU adds to the node's allocatable resources."""
    offered: dict[str, int] = {}
    for dev in cluster.devices(node):
        if dev.gpu == gpu:
            offered[dev.resource] = offered.get(dev.resource, 0) + int(dev.slots)
    return offered


def _adjust_allocatable(cluster: Cluster, node: str, gpu: int, sign: int) -> None:
    obj = cluster.store.get("nodes", "", node)
    if obj is None:
        return
    allocatable = obj["status"].setdefault("allocatable", {})
    for resource, count in _offered(cluster, node, gpu).items():
        current = int(str(allocatable.get(resource, "0")))
        allocatable[resource] = str(max(0, current + sign * count))
    cluster.store.put("nodes", obj)


def node_down(cluster: Cluster, node: str) -> bool:
    """The node's kubelet is gone (a ``{"node", "down": true}`` fault): no heartbeats, its
    pods frozen as they were, its exporter unreachable."""
    return bool(cluster.store.meta_get(f"nodedown/{node}", False))


def inject(cluster: Cluster, body: dict[str, Any]) -> dict[str, Any]:
    """Apply one fault request (see the module's docstring); returns the GPU's fault, or
    ``{"node", "down"}`` for a node."""
    node, gpu = body.get("node"), body.get("gpu")
    if not isinstance(node, str) or cluster.store.get("nodes", "", node) is None:
        raise _bad_request(f"node: no node named {node!r}")
    if "down" in body:
        if not isinstance(body["down"], bool):
            raise _bad_request("down: true (the node stops) or false (it comes back)")
        struck: list[str] = []
        if body["down"] and not node_down(cluster, node):
            struck = _power_off(cluster, node)
        cluster.store.meta_set(f"nodedown/{node}", body["down"])
        _log(cluster, {"node": node, "down": body["down"], "pods": struck})
        return {"node": node, "down": body["down"]}
    if not isinstance(gpu, int) or gpu not in {d.gpu for d in cluster.devices(node)}:
        raise _bad_request(f"gpu: node {node} has no GPU {gpu!r}")
    current = gpu_fault(cluster, node, gpu) or {}
    if "host_client" in body:
        # A process outside Kubernetes (Xorg, nvidia-persistenced, a host DCGM) holds the GPU:
        # pods are not affected, but the MIG manager cannot re-partition it.
        client = body["host_client"]
        if not isinstance(client, str):
            raise _bad_request('host_client: the process name, or "" when it has exited')
        current["host_client"] = client
        cluster.store.meta_set(_key(node, gpu), current)
        _log(cluster, {"node": node, "gpu": gpu, "host_client": client, "pods": []})
        return current
    if body.get("repair"):
        if current.get("healthy") is False:
            _adjust_allocatable(cluster, node, gpu, +1)
        current["healthy"] = True
        cluster.store.meta_set(_key(node, gpu), current)
        _log(cluster, {"node": node, "gpu": gpu, "repair": True, "pods": []})
        cluster.record_event(
            cluster.store.get("nodes", "", node) or {"kind": "Node", "metadata": {"name": node}},
            "Normal",
            "GPUHealthy",
            f"GPU {gpu} is healthy again",
            "nvidia-device-plugin",
            host=node,
        )
        return current
    xid = body.get("xid")
    if xid not in XID_MEANINGS:
        known = ", ".join(f"{code} ({words})" for code, words in XID_MEANINGS.items())
        raise _bad_request(f"xid: one of {known}")
    now = cluster.now()
    if current.get("healthy") is not False:
        _adjust_allocatable(cluster, node, gpu, -1)
    fault = {
        **({"host_client": current["host_client"]} if current.get("host_client") else {}),
        "xid": int(xid),
        "at": now,
        "healthy": False,
        "ecc_dbe": int(current.get("ecc_dbe", 0)) + (1 if xid in ECC_XIDS else 0),
    }
    cluster.store.meta_set(_key(node, gpu), fault)
    node_obj = cluster.store.get("nodes", "", node)
    if node_obj is not None:
        cluster.record_event(
            node_obj,
            "Warning",
            "GPUUnhealthy",
            f"GPU {gpu} reported XID {xid} ({XID_MEANINGS[int(xid)]}); marked unhealthy",
            "nvidia-device-plugin",
            host=node,
        )
    struck = _fail_holders(cluster, node, gpu, int(xid), now)
    _log(cluster, {"node": node, "gpu": gpu, "xid": int(xid), "pods": struck})
    return fault


def answer(cluster: Cluster, method: str, path: str, body: bytes) -> Any:
    """One request to ``/sandbox/faults`` (``GET``: every GPU fault; ``POST``: inject or
    repair one) or ``/sandbox/faults/log`` (callers hold the store's lock)."""
    if path.endswith("/log"):
        return cluster.store.meta_get(LOG, [])
    if method == "GET":
        return {
            key[len("fault/") :]: cluster.store.meta_get(key)
            for key in cluster.store.meta_keys("fault/")
        }
    if method != "POST":
        raise ApiError(405, "MethodNotAllowed", "use GET or POST")
    try:
        request = json.loads(body or b"{}")
    except ValueError as exc:
        raise _bad_request(f"the body is not JSON: {exc}") from exc
    if not isinstance(request, dict):
        raise _bad_request("the body must be a JSON object")
    return inject(cluster, request)


def _log(cluster: Cluster, entry: dict[str, Any]) -> None:
    log = list(cluster.store.meta_get(LOG, []))
    log.append({"at": cluster.wall_now(), **entry})
    cluster.store.meta_set(LOG, log[-LOG_KEPT:])


def _power_off(cluster: Cluster, node: str) -> list[str]:
    """What the node's trainers had saved to their (network) volumes when it went down;
    returns the running pods it strands (``namespace/name``)."""
    now = cluster.now()
    struck = []
    for pod in cluster.store.iter("pods"):
        if pod["spec"].get("nodeName") != node:
            continue
        life = cluster.store.meta_get(f"life/{pod['metadata']['uid']}")
        if isinstance(life, dict) and life.get("state") == "running":
            checkpoints.save(cluster, pod, life, now)
            struck.append(f"{pod['metadata']['namespace']}/{pod['metadata']['name']}")
    return struck


def _fail_holders(cluster: Cluster, node: str, gpu: int, xid: int, now: float) -> list[str]:
    """Every running container on the GPU exits now, with a failure (its log says CUDA's);
    returns their pods (``namespace/name``)."""
    ids = {d.id for d in cluster.devices(node) if d.gpu == gpu}
    struck = []
    for key in cluster.store.meta_keys("assign/"):
        entry = cluster.store.meta_get(key) or {}
        if entry.get("node") != node or not ids.intersection(entry.get("devices", [])):
            continue
        uid = key[len("assign/") :]
        life = cluster.store.meta_get(f"life/{uid}")
        if not isinstance(life, dict) or life.get("state") != "running":
            continue
        # Its container exits now (a server's too: the kubelet sees the XID and ends it).
        life.update(
            {
                "duration": max(0.0, now - float(life["started"])),
                "exit": FAILED_EXIT_CODE,
                "xid": xid,
            }
        )
        cluster.store.meta_set(f"life/{uid}", life)
        cluster.settled.get("kubelet", {}).pop(uid, None)  # due now, not when it was
        struck.append(_pod_name(cluster, uid))
    return struck


def _pod_name(cluster: Cluster, uid: str) -> str:
    for pod in cluster.store.iter("pods"):
        if pod["metadata"]["uid"] == uid:
            return f"{pod['metadata']['namespace']}/{pod['metadata']['name']}"
    return uid


def main(argv: list[str]) -> int:
    """``python -m sandbox fault``: inject or repair a GPU fault in a running sandbox, found
    through a kubeconfig the sandbox wrote (its server, CA and token)."""
    import argparse
    import json
    import urllib.error
    import urllib.request

    import yaml

    p = argparse.ArgumentParser(
        prog="python -m sandbox fault",
        description="Make a GPU of a running sandbox fail like real hardware (an XID error), "
        "or repair it.",
    )
    p.add_argument("--kubeconfig", required=True, help="the kubeconfig the sandbox wrote")
    p.add_argument("--node", required=True)
    p.add_argument("--gpu", type=int, help="the physical GPU's index (GPU faults)")
    what = p.add_mutually_exclusive_group(required=True)
    what.add_argument("--xid", type=int, choices=sorted(XID_MEANINGS))
    what.add_argument("--repair", action="store_true")
    what.add_argument("--down", action="store_true", help="the node's kubelet stops")
    what.add_argument("--up", action="store_true", help="the node's kubelet is back")
    args = p.parse_args(argv)
    if (args.xid or args.repair) and args.gpu is None:
        p.error("--xid and --repair need --gpu")
    with open(args.kubeconfig) as fh:
        config = yaml.safe_load(fh)
    cluster = config["clusters"][0]["cluster"]
    token = config["users"][0]["user"]["token"]
    body: dict[str, Any] = {"node": args.node}
    if args.down or args.up:
        body["down"] = bool(args.down)
    else:
        body |= {"gpu": args.gpu} | ({"repair": True} if args.repair else {"xid": args.xid})
    # The nodes' fault endpoint, which the local cluster's kubeconfig names in an extension.
    server = next(
        (
            str(extension["extension"]["faults"])
            for extension in cluster.get("extensions") or []
            if extension.get("name") == FAULTS_EXTENSION
        ),
        "",
    )
    if not server:
        p.error(f"{args.kubeconfig} is not a local cluster's kubeconfig (no {FAULTS_EXTENSION})")
    if not server.startswith(("https://", "http://")):
        p.error(f"the kubeconfig's fault endpoint {server!r} is not an http(s) URL")
    request = urllib.request.Request(  # noqa: S310 - an http(s) URL, checked above
        server,
        data=json.dumps(body).encode(),
        headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
        method="POST",
    )
    try:
        with urllib.request.urlopen(request, timeout=10) as response:  # noqa: S310
            print(response.read().decode())
    except urllib.error.HTTPError as exc:
        print(exc.read().decode(), file=sys.stderr)
        return 1
    return 0
