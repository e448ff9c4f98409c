"""The profile's nodes simulated by KWOK (``python -m sandbox --nodes kwok``): for the
benchmarks' clusters of hundreds to thousands of nodes, where what is measured is the control
plane and the portal, not what runs on a node.

KWOK (``sigs.k8s.io/kwok``, built by ``localcluster/build.sh kwok``) is a controller: it
keeps the Nodes annotated ``kwok.x-k8s.io/node: fake`` Ready and their Leases renewed, and
moves the pods the real scheduler binds to them to Running, and deletes them when asked,
through the API server (the Stages it plays are listed in ``build.sh``). It runs no
container: no logs, no GPU devices, no DCGM metrics, no GPU Operator, no workspaces, and a
Job's pods run until deleted. The nodes themselves are the profile's, with the same labels,
GPU capacity and taints as the node simulation's (``sandbox.profiles.build_nodes``).
"""

from __future__ import annotations

import datetime as dt
import logging
from typing import Any

from kubernetes import client as k8s
from kubernetes.client.rest import ApiException

from sandbox.profiles import build_nodes, registrable

log = logging.getLogger("sandbox.nodes")

KWOK_ANNOTATION = "kwok.x-k8s.io/node"
KWOK_SELECTOR = f"{KWOK_ANNOTATION}=fake"


def kwok_nodes(profile: dict[str, Any], seed: int, kubelet_version: str) -> list[dict[str, Any]]:
    """The profile's Nodes as KWOK manages them: its annotation, no status of their own (its
    node-initialize Stage writes the conditions, addresses and daemon endpoint)."""
    created = dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    nodes = []
    for spec in build_nodes(profile, seed, created):
        # Nothing is served on a KWOK node's address: loopback, so that nothing dials off
        # the machine for one.
        node = registrable(
            spec.node, provider="kwok", address="127.0.0.1", kubelet_version=kubelet_version
        )
        node["metadata"]["annotations"][KWOK_ANNOTATION] = "fake"
        node["status"]["conditions"] = []
        nodes.append(node)
    return nodes


def register_kwok_nodes(
    api: k8s.ApiClient, profile: dict[str, Any], seed: int, kubelet_version: str
) -> int:
    """Create the profile's nodes that are not there yet; returns how many there are."""
    core = k8s.CoreV1Api(api)
    nodes = kwok_nodes(profile, seed, kubelet_version)
    for node in nodes:
        try:
            core.create_node(node, _preload_content=False, _request_timeout=30)
        except ApiException as exc:
            if exc.status != 409:  # there from before a restart
                raise
    log.info("%d nodes registered for KWOK", len(nodes))
    return len(nodes)
