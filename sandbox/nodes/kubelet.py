"""The kubelets of every simulated node.

1. A pod bound by the scheduler gets concrete GPUs (whole GPUs, time-slice replicas of a
   physical GPU, or MIG instances), as the device plugin's Allocate would, persisted.
2. Pending → ContainerCreating (``Pulling``) → Running (``Pulled``/``Created``/``Started``).
3. Training containers exit after their duration (annotation or default) with their exit
   code; ``OnFailure`` restarts with CrashLoopBackOff, ``Never`` makes the pod terminal.
4. A pod being deleted is stopped (``Killing``) and removed after a short grace.
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass
from typing import Any

from sandbox import annotations as ann
from sandbox import checkpoints, faults, logs, servers
from sandbox.clock import parse_duration
from sandbox.dcgm import bank_energy
from sandbox.state import Cluster
from sandbox.store import Obj
from scheduling import pod_requests

PULL_SECONDS = 2.5
STOP_SECONDS = 1.0
TERMINAL = ("Succeeded", "Failed")


def workload_kind(pod: Obj) -> str:
    kind = ann.get(pod, ann.WORKLOAD)
    if kind in ("training", "inference"):
        return kind
    return "inference" if pod["spec"].get("restartPolicy", "Always") == "Always" else "training"


def _duration(cluster: Cluster, pod: Obj) -> float:
    text = ann.get(pod, ann.DURATION)
    if text:
        try:
            return max(1.0, parse_duration(text))
        except ValueError:
            pass
    return cluster.options.default_training_seconds


def _exit_code(pod: Obj) -> int:
    try:
        return int(ann.get(pod, ann.EXIT_CODE, "0"))
    except ValueError:
        return 1


# -- devices ----------------------------------------------------------------------------------
def _node_usage(cluster: Cluster, node: str) -> dict[str, int]:
    used: dict[str, int] = {}
    for key in cluster.store.meta_keys("assign/"):
        entry = cluster.store.meta_get(key)
        if isinstance(entry, dict) and entry.get("node") == node:
            for dev in entry.get("devices", []):
                used[dev] = used.get(dev, 0) + 1
    return used


def assign_devices(cluster: Cluster, pod: Obj) -> list[str]:
    node = pod["spec"]["nodeName"]
    uid = pod["metadata"]["uid"]
    existing = cluster.store.meta_get(f"assign/{uid}")
    if existing:
        return list(existing["devices"])
    wanted = {k: v for k, v in pod_requests(pod["spec"]).items() if k.startswith("nvidia.com/")}
    chosen: list[str] = []
    if wanted:
        used = _node_usage(cluster, node)
        unhealthy = faults.unhealthy_devices(cluster, node)  # the device plugin skips them
        for resource, count in sorted(wanted.items()):
            candidates = [
                d for d in cluster.devices(node) if d.resource == resource and d.id not in unhealthy
            ]
            for _ in range(int(count)):
                # Spread time-slice replicas over physical GPUs: least-shared first.
                free = [d for d in candidates if used.get(d.id, 0) < d.slots]
                if not free:
                    break
                best = min(free, key=lambda d: (used.get(d.id, 0), d.gpu, d.gi_id))
                used[best.id] = used.get(best.id, 0) + 1
                chosen.append(best.id)
    cluster.store.meta_set(f"assign/{uid}", {"node": node, "devices": chosen})
    return chosen


def release_devices(cluster: Cluster, pod: Obj) -> None:
    uid = pod["metadata"].get("uid", "")
    entry = cluster.store.meta_get(f"assign/{uid}")
    if entry is None:
        return
    bank_energy(cluster, pod, entry)
    cluster.store.meta_delete(f"assign/{uid}")


# -- status -----------------------------------------------------------------------------------
def _condition(ctype: str, status: bool, ts: str, reason: str | None = None) -> dict[str, Any]:
    cond: dict[str, Any] = {
        "type": ctype,
        "status": "True" if status else "False",
        "lastProbeTime": None,
        "lastTransitionTime": ts,
    }
    if reason:
        cond["reason"] = reason
    return cond


def _set_conditions(pod: Obj, wanted: list[dict[str, Any]]) -> None:
    """Replace conditions, keeping lastTransitionTime when a status did not change."""
    old = {c["type"]: c for c in pod["status"].get("conditions") or []}
    merged = []
    for cond in wanted:
        prev = old.get(cond["type"])
        if prev is not None and prev.get("status") == cond["status"]:
            cond["lastTransitionTime"] = prev.get("lastTransitionTime", cond["lastTransitionTime"])
        merged.append(cond)
    # Conditions other controllers own (DisruptionTarget) are kept.
    for ctype, cond in old.items():
        if ctype not in {c["type"] for c in merged}:
            merged.append(cond)
    pod["status"]["conditions"] = merged


def _container_status(
    c: dict[str, Any],
    state: dict[str, Any],
    ready: bool,
    restarts: int,
    uid: str,
    last: dict[str, Any] | None = None,
) -> dict[str, Any]:
    image = c.get("image", "")
    repo = image.split(":")[0] if "@" not in image else image.split("@")[0]
    started = "running" in state
    status: dict[str, Any] = {
        "name": c["name"],
        "state": state,
        "lastState": last or {},
        "ready": ready,
        "restartCount": restarts,
        "image": image
        if ("/" in image.split(":")[0] or "." in image.split("/")[0])
        else f"docker.io/library/{image}",
        "imageID": f"{repo}@sha256:{uid.replace('-', '')[:32]}{'0' * 32}",
        "started": started,
    }
    if started or "terminated" in state:
        status["containerID"] = (
            f"containerd://{uid.replace('-', '')}{c['name'].encode().hex()[:32]}"
        )
    return status


def _ip(pod: Obj, node: Obj | None, cluster: Cluster) -> tuple[str, str]:
    """The node's InternalIP and the pod's own loopback address (``servers.pod_ip``): what
    runs here listens on loopback only, real servers and simulated pods alike."""
    host = ""
    if node:
        host = next(
            (a["address"] for a in node["status"]["addresses"] if a["type"] == "InternalIP"), ""
        )
    return host, servers.pod_ip(pod["metadata"]["uid"])


@dataclass
class _Tick:
    """One pod at one moment: what each step of its life reads."""

    cluster: Cluster
    pod: Obj
    now: float

    def __post_init__(self) -> None:
        meta = self.pod["metadata"]
        self.uid, self.ns, self.name = meta["uid"], meta["namespace"], meta["name"]
        self.node_name: str = self.pod["spec"]["nodeName"]
        self.life_key = f"life/{self.uid}"
        self.ts = self.cluster.stamp(self.now)
        self.containers: list[Obj] = self.pod["spec"].get("containers") or []

    def event(self, type_: str, reason: str, message: str) -> None:
        self.cluster.record_event(self.pod, type_, reason, message, "kubelet", host=self.node_name)

    def save_life(self, life: dict[str, Any]) -> None:
        self.cluster.store.meta_set(self.life_key, life)

    def conditions(self, *wanted: tuple[str, bool, str | None]) -> None:
        _set_conditions(
            self.pod, [_condition(ctype, ok, self.ts, reason) for ctype, ok, reason in wanted]
        )


def _tick_pod(cluster: Cluster, pod: Obj, now: float) -> None:
    """Move one bound pod one step along its life: killed, created, started, exited."""
    tick = _Tick(cluster, pod, now)
    life = cluster.store.meta_get(tick.life_key)
    if pod["metadata"].get("deletionTimestamp"):
        _terminate(tick, life or {})
        return
    if pod["status"].get("phase") in TERMINAL:
        return
    node = cluster.store.get("nodes", "", tick.node_name)
    if life is None:
        _create_containers(tick, node)
    elif life["state"] in ("creating", "backoff") and now >= life["start_at"]:
        _start_containers(tick, life, node)
    elif life["state"] == "running" and life.get("real"):
        _follow_server(tick, life)
    elif (
        life["state"] == "running"
        and (life["kind"] == "training" or life.get("xid") is not None)
        and now >= life["started"] + life["duration"]
    ):
        _exit_containers(tick, life)
    elif life["state"] == "running" and node is not None and _marked_while_node_lost(pod, node):
        _ready_again(tick)


def _ready_condition(obj: Obj) -> Obj:
    conditions = (obj.get("status") or {}).get("conditions") or []
    return next((c for c in conditions if c.get("type") == "Ready"), {})


def _marked_while_node_lost(pod: Obj, node: Obj) -> bool:
    """The pod is not Ready since before its node last became Ready: the node-lifecycle
    controller's mark of a node it had lost, which is back. (A pod marked while its node
    is Ready was marked for a reason of its own: left alone, or the two would write in
    turn.)"""
    pod_ready, node_ready = _ready_condition(pod), _ready_condition(node)
    return (
        pod_ready.get("status") == "False"
        and node_ready.get("status") == "True"
        and str(pod_ready.get("lastTransitionTime") or "")
        <= str(node_ready.get("lastTransitionTime") or "")
    )


def _ready_again(tick: _Tick) -> None:
    """Running, yet not Ready in the API: the node-lifecycle controller marks the pods of a
    node it lost so. Once the node reports Ready again, the kubelet reports them Ready
    again, as its status manager corrects what the API server holds (not before: the
    controller would mark them again, and the two would write in turn)."""
    tick.conditions(("Ready", True, None), ("ContainersReady", True, None))
    tick.cluster.store.put("pods", tick.pod)


def _terminate(tick: _Tick, life: dict[str, Any]) -> None:
    """A deleted pod: stop its containers after the grace period, then remove it."""
    pod, now = tick.pod, tick.now
    if "kill_at" not in life:
        if pod["status"].get("phase") not in TERMINAL and life.get("state") == "running":
            checkpoints.save(tick.cluster, pod, life, now)
            for c in tick.containers:
                tick.event("Normal", "Killing", f"Stopping container {c['name']}")
        grace = float(pod["metadata"].get("deletionGracePeriodSeconds") or 0)
        stop = ann.get(pod, ann.STOP)
        life["kill_at"] = now + min(grace, parse_duration(stop) if stop else STOP_SECONDS)
        tick.save_life(life)
    if now >= life["kill_at"]:
        tick.cluster.servers.stop(tick.uid)
        tick.cluster.store.delete("pods", tick.ns, tick.name)
        release_devices(tick.cluster, pod)
        tick.cluster.store.meta_delete(tick.life_key)


def _create_containers(tick: _Tick, node: Obj | None) -> None:
    """First sight of a bound pod: its devices, its images pulling, ContainerCreating."""
    cluster, pod, now, ts = tick.cluster, tick.pod, tick.now, tick.ts
    devices = assign_devices(cluster, pod)  # first, as the device plugin's Allocate
    planned = _duration(cluster, pod)
    # A restarted trainer resumes from its claim's newest checkpoint: only the rest is left.
    resume = checkpoints.resume_step(cluster, pod) if workload_kind(pod) == "training" else 0
    steps = logs.total_steps(planned)
    resume = min(resume, steps - 1) if resume else 0
    life = {
        "node": tick.node_name,
        "bound": now,
        "start_at": now + PULL_SECONDS,
        "kind": workload_kind(pod),
        "duration": (steps - resume) * logs.step_seconds(planned) if resume else planned,
        "planned": planned,
        "resume_step": resume,
        "exit": _exit_code(pod),
        "devices": devices,
        "restarts": 0,
        "state": "creating",
        "started": None,
        "finished": None,
    }
    tick.save_life(life)
    for c in tick.containers:
        tick.event("Normal", "Pulling", f'Pulling image "{c.get("image", "")}"')
    host_ip, _ = _ip(pod, node, cluster)
    status = pod["status"]
    status.update({"hostIP": host_ip, "hostIPs": [{"ip": host_ip}], "startTime": ts})
    tick.conditions(
        ("PodReadyToStartContainers", False, None),
        ("Initialized", True, None),
        ("Ready", False, "ContainersNotReady"),
        ("ContainersReady", False, "ContainersNotReady"),
        ("PodScheduled", True, None),
    )
    unready = "containers with unready status: [" + " ".join(c["name"] for c in tick.containers)
    for cond in status["conditions"]:
        if cond["type"] in ("Ready", "ContainersReady"):
            cond["message"] = unready + "]"
    status["containerStatuses"] = [
        _container_status(c, {"waiting": {"reason": "ContainerCreating"}}, False, 0, tick.uid)
        for c in tick.containers
    ]
    cluster.store.put("pods", pod)


def _start_containers(tick: _Tick, life: dict[str, Any], node: Obj | None) -> None:
    """Images pulled (or a crash back-off over): the containers run, the pod is Ready."""
    pod, ts = tick.pod, tick.ts
    first = life["state"] == "creating"
    for c in tick.containers:
        if first:
            tick.event(
                "Normal",
                "Pulled",
                f'Successfully pulled image "{c.get("image", "")}" in 2.43s '
                "(2.43s including waiting). Image size: 3514217816 bytes.",
            )
        tick.event("Normal", "Created", f"Created container: {c['name']}")
        tick.event("Normal", "Started", f"Started container {c['name']}")
    real = servers.is_real(pod)
    life.update({"state": "running", "started": tick.now, "finished": None, "real": real})
    tick.save_life(life)
    _, pod_ip = _ip(pod, node, tick.cluster)
    if real:
        pod_ip = servers.pod_ip(tick.uid)
        _start_server(tick, life)
    status = pod["status"]
    status.update({"phase": "Running", "podIP": pod_ip, "podIPs": [{"ip": pod_ip}]})
    # A real server is ready once it answers (``_follow_server``); a simulated one at once.
    ready_reason = "ContainersNotReady" if real else None
    tick.conditions(
        ("PodReadyToStartContainers", True, None),
        ("Initialized", True, None),
        ("Ready", not real, ready_reason),
        ("ContainersReady", not real, ready_reason),
        ("PodScheduled", True, None),
    )
    last = [cs.get("lastState", {}) for cs in status.get("containerStatuses") or []]
    status["containerStatuses"] = [
        _container_status(
            c,
            {"running": {"startedAt": ts}},
            not real,
            life["restarts"],
            tick.uid,
            last[i] if i < len(last) else None,
        )
        for i, c in enumerate(tick.containers)
    ]
    tick.cluster.store.put("pods", pod)


def _start_server(tick: _Tick, life: dict[str, Any]) -> None:
    """The container's env as the kubelet and NVIDIA's runtime give it: its own variables,
    and the GPUs the device plugin assigned (``NVIDIA_VISIBLE_DEVICES``; CUDA numbers
    them from 0), so a notebook can tell which GPU it holds."""
    env = servers.container_env(tick.cluster.store.get, tick.pod)
    devices = [str(d) for d in life.get("devices") or []]
    env.setdefault("NVIDIA_VISIBLE_DEVICES", ",".join(devices) or "void")
    if devices:
        env.setdefault("CUDA_VISIBLE_DEVICES", ",".join(str(i) for i in range(len(devices))))
    tick.cluster.servers.start(tick.pod, env, servers.home_claim(tick.pod, env))


def _follow_server(tick: _Tick, life: dict[str, Any]) -> None:
    """A real server's container: ready once it answers; terminated when its process
    exits (then restarted after a back-off, as ``restartPolicy: Always`` has it); started
    again when the sandbox itself was restarted under it."""
    servers, uid = tick.cluster.servers, tick.uid
    if servers.get(uid) is None:
        _start_server(tick, life)
        return
    code = servers.exit_code(uid)
    if code is not None:
        servers.stop(uid, remove=False)
        terminated = {
            "terminated": {
                "exitCode": code,
                "reason": "Completed" if code == 0 else "Error",
                "startedAt": tick.cluster.stamp(life["started"]),
                "finishedAt": tick.ts,
                "containerID": f"containerd://{uid.replace('-', '')}",
            }
        }
        _back_off(tick, life, tick.now, terminated)
        return
    ready = servers.ready(uid)
    statuses = tick.pod["status"].get("containerStatuses") or []
    if all(cs.get("ready") == ready for cs in statuses):
        return
    for cs in statuses:
        cs["ready"] = ready
    reason = None if ready else "ContainersNotReady"
    tick.conditions(
        ("PodReadyToStartContainers", True, None),
        ("Initialized", True, None),
        ("Ready", ready, reason),
        ("ContainersReady", ready, reason),
        ("PodScheduled", True, None),
    )
    tick.cluster.store.put("pods", tick.pod)


def _exit_containers(tick: _Tick, life: dict[str, Any]) -> None:
    """A training pod's run is over: restarted after a back-off (a failure under
    ``restartPolicy: OnFailure``), or Succeeded/Failed with its devices released."""
    code = int(life["exit"])
    finished = life["started"] + life["duration"]
    terminated = {
        "terminated": {
            "exitCode": code,
            "reason": "Completed" if code == 0 else ("OOMKilled" if code == 137 else "Error"),
            "startedAt": tick.cluster.stamp(life["started"]),
            "finishedAt": tick.cluster.stamp(finished),
            "containerID": f"containerd://{tick.uid.replace('-', '')}",
        }
    }
    if (
        code != 0
        and life.get("xid") is None
        and tick.pod["spec"].get("restartPolicy") == "OnFailure"
    ):
        _back_off(tick, life, finished, terminated)
        return
    pod = tick.pod
    checkpoints.save(tick.cluster, pod, life, finished)
    life.update({"state": "done", "finished": finished})
    tick.save_life(life)
    status = pod["status"]
    status["phase"] = "Succeeded" if code == 0 else "Failed"
    status["containerStatuses"] = [
        _container_status(c, copy.deepcopy(terminated), False, life["restarts"], tick.uid)
        for c in tick.containers
    ]
    tick.conditions(
        ("PodReadyToStartContainers", False, None),
        ("Initialized", True, "PodCompleted"),
        ("Ready", False, "PodCompleted"),
        ("ContainersReady", False, "PodCompleted"),
        ("PodScheduled", True, None),
    )
    tick.cluster.store.put("pods", pod)
    release_devices(tick.cluster, pod)


def _back_off(
    tick: _Tick, life: dict[str, Any], finished: float, terminated: dict[str, Any]
) -> None:
    """CrashLoopBackOff: the kubelet restarts the container after 10 s, 20 s, … 300 s."""
    ns, name, uid = tick.ns, tick.name, tick.uid
    life["restarts"] += 1
    delay = min(300.0, 10.0 * 2 ** (life["restarts"] - 1))
    life.update({"state": "backoff", "start_at": tick.now + delay, "finished": finished})
    tick.save_life(life)
    for c in tick.containers:
        tick.event(
            "Warning",
            "BackOff",
            f"Back-off restarting failed container {c['name']} in pod {name}_{ns}({uid})",
        )
    tick.pod["status"]["containerStatuses"] = [
        _container_status(
            c,
            {
                "waiting": {
                    "reason": "CrashLoopBackOff",
                    "message": f"back-off {int(delay)}s restarting failed container="
                    f"{c['name']} pod={name}_{ns}({uid})",
                }
            },
            False,
            life["restarts"],
            uid,
            terminated,
        )
        for c in tick.containers
    ]
    tick.conditions(
        ("PodReadyToStartContainers", True, None),
        ("Initialized", True, None),
        ("Ready", False, "ContainersNotReady"),
        ("ContainersReady", False, "ContainersNotReady"),
        ("PodScheduled", True, None),
    )
    tick.cluster.store.put("pods", tick.pod)


def _next_due(pod: Obj, life: dict[str, Any] | None) -> float:
    """When the clock alone next changes this pod (its status, or deleting it)."""
    if life is None:
        return 0.0  # not started yet: every pass
    if pod["metadata"].get("deletionTimestamp"):
        return float(life.get("kill_at", 0.0))
    if pod["status"].get("phase") in TERMINAL:
        return math.inf
    if life["state"] in ("creating", "backoff"):
        return float(life["start_at"])
    if life["state"] == "running" and life.get("real"):
        return -math.inf  # a real process: looked at every pass (it may answer or exit)
    if _ready_condition(pod).get("status") == "False":
        # Marked not Ready by the node-lifecycle controller: looked at every pass until its
        # node is Ready again (a change of the node's, not the pod's).
        return -math.inf
    if life["state"] == "running" and (life["kind"] == "training" or life.get("xid") is not None):
        return float(life["started"]) + float(life["duration"])
    return math.inf


def reconcile(cluster: Cluster) -> None:
    """Move every bound pod along its life; pods with nothing due are skipped.

    A pod is skipped while its resourceVersion is the one last seen and the clock has not
    reached its next transition (start, finish, kill), so a quiet node of running pods costs
    a dict lookup per pod instead of a status walk.
    """
    now = cluster.now()
    store = cluster.store
    waiting = cluster.settled.get("kubelet", {})
    still: dict[str, tuple[Any, ...]] = {}
    for pod in store.iter("pods"):
        meta = pod["metadata"]
        if not store.still_stored_after_yield("pods", pod):
            continue
        uid, rv = meta["uid"], meta["resourceVersion"]
        hit = waiting.get(uid)
        if hit is not None and hit[0] == rv and now < hit[1]:
            still[uid] = hit
            continue
        if pod["spec"].get("nodeName") and faults.node_down(cluster, pod["spec"]["nodeName"]):
            continue  # its kubelet is gone: nothing on it moves, nothing is confirmed
        if pod["spec"].get("nodeName"):
            _tick_pod(cluster, pod, now)
            if (
                meta["resourceVersion"] == rv
                and store.get("pods", meta["namespace"], meta["name"]) is pod
            ):
                still[uid] = (rv, _next_due(pod, store.meta_get(f"life/{uid}")))
        elif meta.get("deletionTimestamp"):
            store.delete("pods", meta["namespace"], meta["name"])
    cluster.settled["kubelet"] = still
    if cluster.servers:
        cluster.servers.stop_gone({p["metadata"]["uid"] for p in store.iter("pods")})
