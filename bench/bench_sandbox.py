"""Time N GPU pod creates + scheduling on the large profile against a small baseline.

    .venv/bin/python bench/bench_sandbox.py --pods 200

Both clusters run as real subprocesses; the ratio shows how placement cost grows with
cluster size (hundreds of nodes vs five).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

from kubernetes import client, config

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
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
    results = {p: run(p, args.pods) for p in ("small", "large")}
    for profile, (created, scheduled, nodes) in results.items():
        print(
            f"{profile:6s} nodes={nodes:4d} pods={args.pods} create={created:.2f}s "
            f"create+schedule={scheduled:.2f}s ({args.pods / scheduled:.0f} pods/s)"
        )
    ratio = results["large"][1] / results["small"][1]
    print(f"large/small create+schedule time ratio: {ratio:.2f}")


if __name__ == "__main__":
    main()
