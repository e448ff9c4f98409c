"""What a simulated kubelet answers for a container's log (``GET /containerLogs/…``, and so
``kubectl logs`` through the API server): the simulated work's log rendered up to now
(``sandbox.logs``), a real server's own output (JupyterLab, code-server), or the MIG
manager's record of what it did; with ``container``, ``tailLines``, ``timestamps``,
``sinceSeconds``/``sinceTime``, ``limitBytes`` and ``previous``."""

from __future__ import annotations

from typing import Any

from sandbox import faults, logs
from sandbox.errors import ApiError, bad_request, not_found
from sandbox.state import Cluster


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
