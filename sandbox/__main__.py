"""``python -m sandbox``: start the API server, the metrics server and the controllers.

``python -m sandbox history --profile P --hours 24 --step 60 --out FILE`` instead writes
the DCGM history of a simulated workload as OpenMetrics (see ``sandbox.history``).

``python -m sandbox fault --kubeconfig FILE --node N [--gpu I] --xid 79|--repair|--down|--up``
makes a running sandbox's GPU or node fail, or recover (see ``sandbox.faults``).

On start it prints one ready line and writes a JSON ports file, so a test fixture that
asked for port 0 can find the ports it got::

    SANDBOX READY api=https://127.0.0.1:6443 metrics=http://127.0.0.1:9400/metrics ...
"""

from __future__ import annotations

import argparse
import base64
import json
import logging
import os
import signal
import sys
import threading
from pathlib import Path
from typing import Any

import yaml

from sandbox import faults, history, localcluster
from sandbox.api import crds
from sandbox.bootstrap import bootstrap, install_crds, install_training_runtimes
from sandbox.controllers import faultplan
from sandbox.controllers.manager import ControllerManager
from sandbox.gpu_operator import install_gpu_operator
from sandbox.profiles import load_profile
from sandbox.server import ApiServer, MetricsServer
from sandbox.state import Cluster, Options
from sandbox.store import WATCH_WINDOW, Store
from sandbox.tls import certificates


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m sandbox", description=__doc__.splitlines()[0])
    p.add_argument("--profile", default="default", help="profile name or YAML path")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=6443, help="API port (0 picks a free one)")
    p.add_argument("--metrics-port", type=int, default=9400, help="dcgm-exporter port (0: free)")
    p.add_argument("--state", default=".sandbox/state.sqlite3", help="SQLite state file")
    p.add_argument("--kubeconfig", default=".sandbox/kubeconfig", help="kubeconfig to write")
    p.add_argument("--ports-file", default=None, help="JSON file with the chosen ports")
    p.add_argument("--speed", type=float, default=1.0, help="simulated seconds per real second")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--reset", action="store_true", help="start from an empty state file")
    p.add_argument("--token", default=os.environ.get("SANDBOX_TOKEN", "sandbox-token"))
    p.add_argument("--event-ttl", type=float, default=3600.0, help="simulated seconds")
    p.add_argument(
        "--default-duration",
        type=float,
        default=60.0,
        help="simulated seconds a training container runs without an annotation",
    )
    p.add_argument(
        "--watch-window",
        type=int,
        default=WATCH_WINDOW,
        help="changes the watch cache keeps; a watch from an older version gets 410 Gone",
    )
    p.add_argument(
        "--insecure-http",
        action="store_true",
        help="serve the API over plain HTTP (kubectl and helm then send no token: every "
        "call is 401); the default is HTTPS with a throwaway CA written into the kubeconfig",
    )
    p.add_argument(
        "--control-plane",
        choices=("real", "python"),
        default=os.environ.get("SANDBOX_CONTROL_PLANE", "real"),
        help="real: kube-apiserver, etcd, the controllers, Kueue, JobSet, Trainer and the "
        "training operator built from their Go modules (localcluster/), with simulated GPU "
        "nodes; python: the old stand-in, being retired",
    )
    p.add_argument("--log-level", default="WARNING")
    return p.parse_args(argv)


def kubeconfig(server: str, token: str, ca_pem: bytes | None = None) -> dict[str, Any]:
    cluster: dict[str, Any] = {"server": server}
    if ca_pem is not None:
        cluster["certificate-authority-data"] = base64.b64encode(ca_pem).decode()
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "sandbox", "cluster": cluster}],
        "users": [{"name": "sandbox-admin", "user": {"token": token}}],
        "contexts": [
            {
                "name": "sandbox",
                "context": {"cluster": "sandbox", "user": "sandbox-admin", "namespace": "default"},
            }
        ],
        "current-context": "sandbox",
        "preferences": {},
    }


def _announce(
    args: argparse.Namespace,
    api: ApiServer,
    metrics: MetricsServer,
    certs: Any,
    profile: dict[str, Any],
) -> None:
    """Write the kubeconfig and the ports file, then print the ready line."""
    api_url = api.url
    metrics_url = f"http://{args.host}:{metrics.server_address[1]}/metrics"
    kc_path = Path(args.kubeconfig)
    kc_path.parent.mkdir(parents=True, exist_ok=True)
    kc_path.write_text(
        yaml.safe_dump(
            kubeconfig(api_url, args.token, certs.ca_pem if certs else None), sort_keys=False
        )
    )
    info = {
        "api_port": api.server_address[1],
        "metrics_port": metrics.server_address[1],
        "api_url": api_url,
        "metrics_url": metrics_url,
        "kubeconfig": str(kc_path),
        "ca_file": str(certs.cert_file.parent / "ca.crt") if certs else None,
        "token": args.token,
        "pid": os.getpid(),
    }
    if args.ports_file:
        tmp = Path(args.ports_file + ".tmp")
        tmp.write_text(json.dumps(info))
        tmp.replace(args.ports_file)
    print(
        f"SANDBOX READY api={api_url} metrics={metrics_url} kubeconfig={kc_path} "
        f"profile={profile.get('name', args.profile)} speed={args.speed}",
        flush=True,
    )


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "history":
        return history.main(argv[1:])
    if argv and argv[0] == "fault":
        return faults.main(argv[1:])
    args = parse_args(argv)
    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(name)s %(message)s")
    if args.control_plane == "real":
        return localcluster.run(args)
    profile = load_profile(args.profile)
    try:
        fault_rates = faultplan.check_config(profile.get("faults"))
    except ValueError as exc:
        print(f"profile {args.profile}: {exc}", file=sys.stderr)
        return 2
    store = Store(args.state, reset=args.reset, watch_window=args.watch_window)
    options = Options(
        token=args.token,
        seed=args.seed,
        speed=args.speed,
        event_ttl=args.event_ttl,
        default_training_seconds=args.default_duration,
        faults=fault_rates,
        workdir=str(Path(args.state).parent),
    )
    cluster = Cluster(store, options)
    crds.load(store.list(crds.CRD_KEY))
    bootstrap(cluster, profile)
    install_crds(cluster)
    install_training_runtimes(cluster)
    install_gpu_operator(cluster, profile)
    certs = None if args.insecure_http else certificates(Path(args.state).parent / "pki", args.host)
    api = ApiServer((args.host, args.port), cluster, certs.server_context() if certs else None)
    metrics = MetricsServer((args.host, args.metrics_port), cluster)
    manager = ControllerManager(cluster)
    manager.start()
    threads = [
        threading.Thread(target=s.serve_forever, kwargs={"poll_interval": 0.2}, daemon=True)
        for s in (api, metrics)
    ]
    for t in threads:
        t.start()
    _announce(args, api, metrics, certs, profile)

    done = threading.Event()

    def stop(signum: int, frame: object) -> None:
        done.set()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    done.wait()
    for server in (api, metrics):
        server.shutdown()
        server.server_close()
    manager.stop()
    cluster.servers.stop_all()
    store.close()
    print("SANDBOX STOPPED", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
