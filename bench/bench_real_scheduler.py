"""real_scheduler: the real kube-scheduler placing GPU pods on the local cluster's large profile.

Run: .venv/bin/python bench/bench_real_scheduler.py [--pods 2000] [--profile large]
     (or make bench NAME=real_scheduler)

The cluster is ``python -m sandbox`` (the real API server, etcd,
kube-scheduler and controllers, built by localcluster/) with the profile's nodes (500 GPU
nodes of 8 GPUs and 40 CPU nodes for ``large``) run by KWOK (``--nodes kwok``, the default
here: ``sandbox/nodes/kwok.py``) or by the project's node simulation (``--nodes simulated``,
which also runs the GPU Operator's 5,460 operand pods on them).

1. Baseline: N pods (1 GPU each, tolerating the GPU taint) created with a ``schedulerName``
   no scheduler serves, so they stay unscheduled: the API server's pod create rate from this
   client (8 threads).
2. The same N pods for the default scheduler: the time from the first create to every pod
   bound (``spec.nodeName`` set), read from a watch. Figure: pods bound per second, and its
   ratio to the baseline (1.0 would mean the scheduler keeps up with creation).

The scheduler, the API server and etcd are the real ones in both cases.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from kubernetes import client, config, watch

from bench.harness import start
from tests.sandbox_process import start_sandbox

THREADS = 8


def pod(name: str, scheduler: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "schedulerName": scheduler,
            "restartPolicy": "Never",
            "tolerations": [
                {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
            ],
            "containers": [
                {
                    "name": "c",
                    "image": "busybox",
                    "resources": {"limits": {"nvidia.com/gpu": "1"}, "requests": {"cpu": "100m"}},
                }
            ],
        },
    }


def create_all(core: client.CoreV1Api, ns: str, count: int, scheduler: str) -> float:
    """Create ``count`` pods from THREADS threads; the seconds it took."""
    started = time.perf_counter()
    with ThreadPoolExecutor(THREADS) as pool:
        list(
            pool.map(
                lambda i: core.create_namespaced_pod(ns, pod(f"p-{i}", scheduler)), range(count)
            )
        )
    return time.perf_counter() - started


def bound_after(core: client.CoreV1Api, ns: str, count: int, started: list[float]) -> float:
    """Seconds from ``started[0]`` until ``count`` pods of ``ns`` are bound (a watch)."""
    bound: set[str] = set()
    stream = watch.Watch()
    for event in stream.stream(core.list_namespaced_pod, ns, timeout_seconds=600):
        obj = event["object"]
        if obj.spec.node_name:
            bound.add(obj.metadata.name)
        if len(bound) >= count:
            stream.stop()
            break
    return time.perf_counter() - started[0]


def namespace(core: client.CoreV1Api, name: str) -> str:
    core.create_namespace({"metadata": {"name": name}})
    return name


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--pods", type=int, default=2000)
    parser.add_argument("--profile", default="large")
    parser.add_argument(
        "--nodes", choices=("kwok", "simulated"), default="kwok", help="who runs the nodes"
    )
    args = parser.parse_args()
    report = start(
        "real_scheduler",
        f"the real kube-scheduler binding GPU pods on nodes run by {args.nodes}",
        pods=args.pods,
        profile=args.profile,
        nodes=args.nodes,
    )
    with tempfile.TemporaryDirectory() as tmp:
        proc = start_sandbox(
            Path(tmp), profile=args.profile, speed=1, extra_args=("--nodes", args.nodes)
        )
        try:
            api = config.new_client_from_config(str(proc.kubeconfig))
            api.configuration.connection_pool_maxsize = THREADS * 2
            core = client.CoreV1Api(api)
            nodes = len(core.list_node().items)
            baseline = create_all(core, namespace(core, "bench-unscheduled"), args.pods, "nobody")
            ns = namespace(core, "bench-scheduled")
            started: list[float] = []
            result: dict[str, float] = {}
            watcher = threading.Thread(
                target=lambda: result.update(bound=bound_after(core, ns, args.pods, started))
            )
            started.append(time.perf_counter())
            watcher.start()
            created = create_all(core, ns, args.pods, "default-scheduler")
            watcher.join(timeout=900)
        finally:
            proc.stop(timeout=60)
    create_rate = args.pods / baseline
    bound_rate = args.pods / result["bound"]
    report.row("create, no scheduler (baseline)", pods_per_s=round(create_rate, 1), nodes=nodes)
    report.row(
        "create and bind, kube-scheduler",
        baseline="create, no scheduler (baseline)",
        ratio_of="pods_per_s",
        pods_per_s=round(bound_rate, 1),
        create_s=round(created, 1),
        nodes=nodes,
    )
    path = report.finish()
    print(json.dumps({"report": str(path)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
