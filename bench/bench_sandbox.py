"""How fast does the sandbox API server take pod creates, on a small and a large cluster?

    .venv/bin/python bench/bench_sandbox.py --pods 200

N GPU pods created one by one through the official client, then waited for until the
scheduler has decided on each. Both clusters run as real subprocesses; the ratio shows how
create + placement cost grows with the cluster (540 nodes against 5). This measures the
stand-in the other benchmarks run against, not the portal.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

from kubernetes import client, config

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench.harness import start
from tests.sandbox_process import start_sandbox


def run(profile: str, pods: int) -> tuple[float, float, int]:
    with tempfile.TemporaryDirectory() as tmp:
        proc = start_sandbox(Path(tmp), profile=profile, speed=1.0)
        try:
            core = client.CoreV1Api(config.new_client_from_config(str(proc.kubeconfig)))
            nodes = len(core.list_node().items)
            core.create_namespace({"metadata": {"name": "bench"}})
            body = {
                "metadata": {"generateName": "bench-"},
                "spec": {
                    "restartPolicy": "Never",
                    "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists"}],
                    "containers": [
                        {
                            "name": "main",
                            "image": "busybox:1.36",
                            "resources": {"limits": {"nvidia.com/gpu": 1}},
                        }
                    ],
                },
            }
            start = time.perf_counter()
            for _ in range(pods):
                core.create_namespaced_pod("bench", body)
            created = time.perf_counter() - start
            while True:
                items = core.list_namespaced_pod("bench").items
                # Done when the scheduler has decided on every pod: bound or Unschedulable.
                if all(
                    p.spec.node_name
                    or any(c.type == "PodScheduled" for c in p.status.conditions or [])
                    for p in items
                ):
                    break
                time.sleep(0.05)
            return created, time.perf_counter() - start, nodes
        finally:
            proc.stop()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--pods", type=int, default=100)
    args = parser.parse_args()
    report = start(
        "sandbox", "Sandbox API server: GPU pod creates, small vs large cluster", pods=args.pods
    )
    for profile in ("small", "large"):
        created, scheduled, nodes = run(profile, args.pods)
        report.row(
            f"{profile} profile",
            baseline="small profile" if profile == "large" else None,
            ratio_of="wall_s",
            wall_s=round(scheduled, 3),
            create_s=round(created, 3),
            pods_per_s=round(args.pods / scheduled, 1),
            nodes=nodes,
        )
    report.finish()


if __name__ == "__main__":
    main()
