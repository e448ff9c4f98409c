"""Faults at a rate, for soak runs: a profile's ``faults`` section.

```yaml
faults:
  gpuFailuresPerGpuHour: 0.05   # XID errors per GPU per simulated hour
  nodeFailuresPerNodeHour: 0.0  # kubelets that stop, per node per simulated hour
  xids: [79, 48, 94, 95, 74]    # the XID of each GPU failure, drawn from these
  busyOnly: true                # strike only GPUs (nodes) that pods hold: a soak run's interest
  repairAfter: 10m              # a failed GPU is reset and back in service after this
  nodeDownFor: 5m               # a stopped node's kubelet comes back after this
```

Each fault goes through ``sandbox.faults.inject``, exactly as an injected one. Arrivals are
a Poisson process over simulated time: the gap to the next fault of a kind is exponential
with rate × the candidates at that moment (all GPUs or nodes, or the held ones). Every draw
comes from a generator seeded with ``--seed`` and the fault's number, so a seed gives the
same sequence of gaps and picks; which pod a fault hits depends on what runs there then.
"""

from __future__ import annotations

import logging
import random
from typing import Any

from sandbox import faults
from sandbox.clock import parse_duration
from sandbox.state import Cluster

log = logging.getLogger("sandbox.faults")
STATE = "faultplan"
IDLE_RETRY_SECONDS = 60.0  # nothing to strike (an empty cluster): look again after this


KEYS = (
    "gpuFailuresPerGpuHour",
    "nodeFailuresPerNodeHour",
    "xids",
    "busyOnly",
    "repairAfter",
    "nodeDownFor",
)


def check_config(config: Any) -> dict[str, Any]:
    """A profile's ``faults`` section, checked; ``ValueError`` names the key and the fix."""
    if config is None:
        return {}
    if not isinstance(config, dict):
        raise ValueError("faults: a mapping (see sandbox/nodes/faultplan.py)")
    for key in config:
        if key not in KEYS:
            raise ValueError(f"faults.{key}: unknown; the keys are {', '.join(KEYS)}")
    for key in ("gpuFailuresPerGpuHour", "nodeFailuresPerNodeHour"):
        if not isinstance(config.get(key, 0), int | float) or config.get(key, 0) < 0:
            raise ValueError(f"faults.{key}: a number of faults per hour, 0 or more")
    for xid in config.get("xids") or []:
        if xid not in faults.XID_MEANINGS:
            raise ValueError(f"faults.xids: {xid!r} is not one of {sorted(faults.XID_MEANINGS)}")
    for key in ("repairAfter", "nodeDownFor"):
        if key in config:
            parse_duration(str(config[key]))
    return dict(config)


def _config(cluster: Cluster) -> dict[str, Any]:
    return dict(cluster.options.faults or {})


def _rng(cluster: Cluster, kind: str, n: int) -> random.Random:
    return random.Random(f"{cluster.options.seed}/faults/{kind}/{n}")


def _held_gpus(cluster: Cluster) -> list[tuple[str, int]]:
    """(node, physical GPU) pairs some pod holds, sorted."""
    held: set[tuple[str, int]] = set()
    index: dict[str, dict[str, int]] = {}
    for key in cluster.store.meta_keys("assign/"):
        entry = cluster.store.meta_get(key) or {}
        node = entry.get("node")
        if not node or not entry.get("devices"):
            continue
        if node not in index:
            index[node] = {d.id: d.gpu for d in cluster.devices(node)}
        held.update((node, index[node][d]) for d in entry["devices"] if d in index[node])
    return sorted(held)


def _gpu_candidates(cluster: Cluster, busy_only: bool) -> list[tuple[str, int]]:
    if busy_only:
        found = _held_gpus(cluster)
    else:
        found = sorted(
            (node["metadata"]["name"], gpu)
            for node in cluster.store.iter("nodes")
            for gpu in {d.gpu for d in cluster.devices(node["metadata"]["name"])}
        )
    return [
        (node, gpu)
        for node, gpu in found
        if (faults.gpu_fault(cluster, node, gpu) or {}).get("healthy") is not False
        and not faults.node_down(cluster, node)
    ]


def _node_candidates(cluster: Cluster, busy_only: bool) -> list[str]:
    names = (
        sorted({node for node, _ in _held_gpus(cluster)})
        if busy_only
        else sorted(
            n["metadata"]["name"]
            for n in cluster.store.iter("nodes")
            if cluster.devices(n["metadata"]["name"])
        )
    )
    return [name for name in names if not faults.node_down(cluster, name)]


def reconcile(cluster: Cluster) -> None:
    config = _config(cluster)
    if not config:
        return
    now = cluster.now()
    state: dict[str, Any] = cluster.store.meta_get(STATE) or {"n": {}, "at": {}, "undo": []}
    before = repr(state)
    busy_only = bool(config.get("busyOnly", True))
    _undo_due(cluster, state, now)
    _strike(
        cluster, state, now, "gpu", float(config.get("gpuFailuresPerGpuHour") or 0.0),
        lambda: _gpu_candidates(cluster, busy_only),
        lambda rng, target, at: _gpu_fault(cluster, state, config, rng, target, at),
    )  # fmt: skip
    _strike(
        cluster, state, now, "node", float(config.get("nodeFailuresPerNodeHour") or 0.0),
        lambda: _node_candidates(cluster, busy_only),
        lambda rng, target, at: _node_fault(cluster, state, config, target, at),
    )  # fmt: skip
    if repr(state) != before:
        cluster.store.meta_set(STATE, state)


def _strike(
    cluster: Cluster,
    state: dict[str, Any],
    now: float,
    kind: str,
    rate: float,
    candidates: Any,
    act: Any,
) -> None:
    """Fire every fault of ``kind`` that is due by ``now``, drawing the gap to the next."""
    if rate <= 0:
        return
    at = state["at"].get(kind)
    if at is None:
        state["at"][kind] = now + _gap(cluster, kind, state, rate, len(candidates()))
        return
    while at <= now:
        n = int(state["n"].get(kind, 0))
        # Repairs due before this fault come first, in simulated order, whatever the
        # pass's own timing: a seed gives the same sequence.
        _undo_due(cluster, state, at)
        found = candidates()
        if found:
            rng = _rng(cluster, kind, n)
            act(rng, found[rng.randrange(len(found))], at)
            state["n"][kind] = n + 1
        at += _gap(cluster, kind, state, rate, len(candidates()))
    state["at"][kind] = at


def _gap(cluster: Cluster, kind: str, state: dict[str, Any], rate: float, count: int) -> float:
    if count == 0:
        return IDLE_RETRY_SECONDS
    rng = _rng(cluster, f"{kind}-gap", int(state["n"].get(kind, 0)))
    return rng.expovariate(rate * count / 3600.0)


def _gpu_fault(
    cluster: Cluster,
    state: dict[str, Any],
    config: dict[str, Any],
    rng: random.Random,
    target: tuple[str, int],
    now: float,
) -> None:
    node, gpu = target
    xids = [int(x) for x in config.get("xids") or sorted(faults.XID_MEANINGS)]
    xid = xids[rng.randrange(len(xids))]
    faults.inject(cluster, {"node": node, "gpu": gpu, "xid": xid})
    log.warning("fault plan: GPU %s of node %s reports XID %s", gpu, node, xid)
    repair = parse_duration(str(config.get("repairAfter") or "10m"))
    state["undo"].append([now + repair, node, gpu])


def _node_fault(
    cluster: Cluster, state: dict[str, Any], config: dict[str, Any], node: str, now: float
) -> None:
    faults.inject(cluster, {"node": node, "down": True})
    log.warning("fault plan: node %s stops", node)
    back = parse_duration(str(config.get("nodeDownFor") or "5m"))
    state["undo"].append([now + back, node, None])


def _undo_due(cluster: Cluster, state: dict[str, Any], now: float) -> None:
    """Repair the GPUs and restart the nodes whose time has come."""
    left = []
    for at, node, gpu in state["undo"]:
        if at > now:
            left.append([at, node, gpu])
        elif gpu is None:
            faults.inject(cluster, {"node": node, "down": False})
        else:
            faults.inject(cluster, {"node": node, "gpu": gpu, "repair": True})
    state["undo"] = left
