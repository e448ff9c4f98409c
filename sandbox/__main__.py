"""``python -m sandbox``: the local cluster — the real control plane (``localcluster/``,
built from the components' Go modules) with simulated GPU nodes (``sandbox.nodes``); see
``sandbox.localcluster``.

``python -m sandbox history --profile P --hours 24 --step 60 --out FILE`` instead writes
the DCGM history of a simulated workload as OpenMetrics (see ``sandbox.history``).

``python -m sandbox fault --kubeconfig FILE --node N [--gpu I] --xid 79|--repair|--down|--up``
makes a running local cluster's GPU or node fail, or recover (see ``sandbox.faults``).

On start it prints one ready line and writes a JSON ports file, so a test fixture that
asked for port 0 can find the ports it got::

    SANDBOX READY api=https://127.0.0.1:6443 metrics=http://127.0.0.1:9400/metrics ...
"""

from __future__ import annotations

import argparse
import logging
import os
import sys

from sandbox import faults, history, localcluster


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m sandbox", description=__doc__.splitlines()[0])
    p.add_argument("--profile", default="default", help="profile name or YAML path")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=6443, help="API port (0 picks a free one)")
    p.add_argument("--metrics-port", type=int, default=9400, help="dcgm-exporter port (0: free)")
    p.add_argument(
        "--state",
        default=".sandbox/state",
        help="the cluster's folder: etcd's data, the nodes' state, logs (kept across restarts)",
    )
    p.add_argument("--kubeconfig", default=".sandbox/kubeconfig", help="kubeconfig to write")
    p.add_argument("--ports-file", default=None, help="JSON file with the chosen ports")
    p.add_argument("--speed", type=float, default=1.0, help="simulated seconds per real second")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--reset", action="store_true", help="start from an empty state folder")
    p.add_argument("--token", default=os.environ.get("SANDBOX_TOKEN", "sandbox-token"))
    p.add_argument("--event-ttl", type=float, default=3600.0, help="simulated seconds")
    p.add_argument(
        "--default-duration",
        type=float,
        default=60.0,
        help="simulated seconds a training container runs without an annotation",
    )
    p.add_argument(
        "--nodes",
        choices=("simulated", "kwok"),
        default="simulated",
        help="who runs the profile's nodes: the node simulation (GPUs, logs, DCGM, workspaces) "
        "or KWOK (nodes and running pods only, for the benchmarks' thousands of pods)",
    )
    p.add_argument("--log-level", default="WARNING")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "history":
        return history.main(argv[1:])
    if argv and argv[0] == "fault":
        return faults.main(argv[1:])
    args = parse_args(argv)
    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(name)s %(message)s")
    return localcluster.run(args)


if __name__ == "__main__":
    sys.exit(main())
