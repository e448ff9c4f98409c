"""How long does placing one pod take as the cluster grows?

Run: .venv/bin/python bench/bench_scheduling.py [--repeat N]

Builds synthetic GPU clusters (8 GPUs per node, mixed products, some tainted and
cordoned nodes, a few MIG nodes) with a given number of bound pods, then times
``schedule`` for a few typical pods: median wall time over ``--repeat`` runs. The
ratio column compares each row with the 100-node row of the same pod and mode
measured in this run, so the numbers carry over between machines.

Modes:
  snapshot   a ClusterSnapshot built once and reused (how the sandbox places pods)
  sequences  nodes and bound pods passed as lists (each call rebuilds per-node usage)
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from scheduling import (
    ClusterSnapshot,
    LabelSelector,
    Node,
    Pod,
    PodAffinityTerm,
    Taint,
    schedule,
)

GIB = 2**30
PRODUCTS = ("NVIDIA-A100-SXM4-80GB", "NVIDIA-H100-80GB-HBM3", "NVIDIA-L40S")
MIG = "nvidia.com/mig-1g.10gb"


def build_cluster(num_nodes: int, num_pods: int, seed: int = 7) -> tuple[list[Node], list[Pod]]:
    rng = random.Random(seed)
    nodes: list[Node] = []
    for i in range(num_nodes):
        name = f"gpu-{i:05}"
        product = PRODUCTS[i % len(PRODUCTS)]
        taints: tuple[Taint, ...] = ()
        if i % 10 == 3:
            taints = (Taint("dedicated", "llm-team", "NoSchedule"),)
        elif i % 10 == 5:
            taints = (Taint("spot", "true", "PreferNoSchedule"),)
        allocatable = {"cpu": 128_000, "memory": 1024 * GIB, "pods": 110, "nvidia.com/gpu": 8}
        if i % 25 == 0:
            allocatable = {"cpu": 128_000, "memory": 1024 * GIB, "pods": 110, MIG: 56}
        nodes.append(
            Node(
                name=name,
                labels={
                    "kubernetes.io/hostname": name,
                    "nvidia.com/gpu.product": product,
                    "topology.kubernetes.io/zone": f"zone-{i % 4}",
                },
                taints=taints,
                allocatable=allocatable,
                unschedulable=i % 50 == 7,
            )
        )
    pods: list[Pod] = []
    free = {n.name: n.allocatable.get("nvidia.com/gpu", 0) for n in nodes}
    names = [n.name for n in nodes]
    attempts = 0
    while len(pods) < num_pods and attempts < num_pods * 20:
        attempts += 1
        target = rng.choice(names)
        gpus = rng.choice((0, 1, 1, 2, 4))
        if gpus > free[target]:
            continue
        free[target] -= gpus
        requests = {"cpu": 2000 * max(gpus, 1), "memory": 16 * GIB * max(gpus, 1)}
        if gpus:
            requests["nvidia.com/gpu"] = gpus
        pods.append(
            Pod(
                name=f"job-{len(pods)}",
                namespace=f"team-{len(pods) % 12}",
                labels={"app": f"job-{len(pods) % 300}"},
                requests=requests,
                priority=rng.choice((0, 100, 1000)),
                node_name=target,
            )
        )
    return nodes, pods


INCOMING: dict[str, Pod] = {
    "fits (1 GPU, A100)": Pod(
        name="fits",
        requests={"cpu": 4000, "memory": 32 * GIB, "nvidia.com/gpu": 1},
        node_selector={"nvidia.com/gpu.product": PRODUCTS[0]},
    ),
    "anti-affinity (2 GPU)": Pod(
        name="spread",
        namespace="team-1",
        labels={"app": "job-1"},
        requests={"cpu": 4000, "nvidia.com/gpu": 2},
        required_pod_anti_affinity=(PodAffinityTerm(LabelSelector((("app", "job-1"),))),),
    ),
    "preempts (8 GPU, high prio)": Pod(
        name="urgent", requests={"nvidia.com/gpu": 8}, priority=10_000
    ),
}


def median_ms(fn: Callable[[], object], repeat: int) -> float:
    fn()  # warm-up
    samples = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - start) * 1000)
    return statistics.median(samples)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=15)
    args = parser.parse_args()

    sizes = [(100, 800), (1_000, 8_000), (1_000, 16_000), (5_000, 40_000)]
    baseline: dict[tuple[str, str], float] = {}
    header = (
        f"{'nodes':>6} {'pods':>7} {'GPUs':>6}  {'pod':<28} {'mode':<9} "
        f"{'median ms':>10} {'ratio':>7}  result"
    )
    print(header)
    print("-" * len(header))
    for num_nodes, num_pods in sizes:
        nodes, pods = build_cluster(num_nodes, num_pods)
        gpus = sum(n.allocatable.get("nvidia.com/gpu", 0) for n in nodes)
        build_start = time.perf_counter()
        snapshot = ClusterSnapshot(nodes, pods)
        build_ms = (time.perf_counter() - build_start) * 1000
        for label, incoming in INCOMING.items():
            runs: dict[str, Callable[[], object]] = {
                "snapshot": partial(schedule, incoming, snapshot),
                "sequences": partial(schedule, incoming, nodes, pods),
            }
            for mode, fn in runs.items():
                ms = median_ms(fn, args.repeat)
                key = (label, mode)
                baseline.setdefault(key, ms)
                result = schedule(incoming, snapshot)
                outcome = result.node or (
                    f"nominate {result.nominated_node}" if result.nominated_node else "pending"
                )
                print(
                    f"{num_nodes:>6} {len(pods):>7} {gpus:>6}  {label:<28} {mode:<9} "
                    f"{ms:>10.2f} {ms / baseline[key]:>6.1f}x  {outcome}"
                )
        print(f"{'':>6} snapshot build for {num_nodes} nodes / {len(pods)} pods: {build_ms:.1f} ms")


if __name__ == "__main__":
    main()
