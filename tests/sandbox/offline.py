"""The node simulation in-process, with no control plane: a store holding the profile's
nodes and their devices as the node agent registers them, for unit tests of the parts that
work on that state alone (the fault plan, the DCGM exporter's readings)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from sandbox.nodes.agent import node_conditions
from sandbox.profiles import build_nodes
from sandbox.state import Cluster, Options
from sandbox.store import Store


def offline_cluster(
    path: Path, profile: dict[str, Any], options: Options, clock: Any = None
) -> Cluster:
    """``clock`` replaces the simulated clock (a test's fixed instant) before anything is
    stamped."""
    cluster = Cluster(Store(path), options)
    if clock is not None:
        cluster.clock = clock
    stamp = cluster.stamp(cluster.now())
    for spec in build_nodes(profile, options.seed, stamp):
        node = spec.node
        node["metadata"]["uid"] = cluster.new_uid()
        node["status"]["conditions"] = node_conditions(stamp)
        cluster.store.put("nodes", node)
        cluster.store.meta_set(
            f"devices/{node['metadata']['name']}", [d.to_json() for d in spec.devices]
        )
    return cluster
