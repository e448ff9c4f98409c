"""``python -m sandbox``: the real control plane and the simulated GPU nodes, with the same
command line, ready line, ports file and signals as the project's first local cluster.

1. The control plane starts (``sandbox.controlplane``); ``--state`` names its folder (a
   ``.sqlite3`` suffix is dropped, so the old paths still work) and ``--reset`` empties it.
2. The nodes register and start (``sandbox.nodes``), the DCGM exporter serves ``/metrics``.
3. The kubeconfig and the ports file are written, then ``SANDBOX READY api=… metrics=…``.
4. SIGTERM or SIGINT stops the nodes (and their JupyterLab/code-server processes), then every
   control-plane process this started, and nothing else.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import ssl
import sys
import threading
from pathlib import Path
from typing import Any

import yaml
from kubernetes import config as k8s_config

from sandbox.controlplane.plane import ControlPlane, ControlPlaneError
from sandbox.controlplane.ports import NoFreePort, free_port
from sandbox.faults import FAULTS_EXTENSION
from sandbox.nodes import faultplan
from sandbox.nodes.agent import NodeAgent
from sandbox.nodes.kwok import KWOK_SELECTOR, register_kwok_nodes
from sandbox.nodes.metrics_server import MetricsServer
from sandbox.profiles import load_profile
from sandbox.state import Cluster, Options


def state_folder(state: str) -> Path:
    """The folder of the cluster's state (``--state``; an old state file's name without its
    ``.sqlite3``), absolute: the components run in folders of their own, and a relative
    path (``make run``'s ``var/sandbox``) would name files they cannot find."""
    path = Path(state).expanduser().resolve()
    return path.with_suffix("") if path.suffix == ".sqlite3" else path


def run(args: argparse.Namespace) -> int:
    profile = load_profile(args.profile)
    try:
        fault_rates = faultplan.check_config(profile.get("faults"))
    except ValueError as exc:
        print(f"profile {args.profile}: {exc}", file=sys.stderr)
        return 2
    folder = state_folder(args.state)
    if args.reset and folder.exists():
        shutil.rmtree(folder)
    plane = ControlPlane(state=folder, token=args.token, apiserver_port=args.port)
    if args.nodes == "kwok":
        return _run_with_kwok(args, plane, profile)
    agents: list[NodeAgent] = []

    def nodes_keep_their_leases() -> None:
        # As soon as the API server answers, before the node-lifecycle controller starts: the
        # nodes of a restarted cluster renew their Leases from then on, as kubelets that
        # never stopped would. Started only after every operator was up, they came 15 s
        # after the controller on an idle machine and over a minute on a loaded one, past
        # its 8 s grace: it tainted them unreachable and evicted their pods.
        agents.append(_agent(args, plane, folder, profile, fault_rates))
        agents[0].keep_leases()

    try:
        plane.start(
            on_step=lambda step: print(f"starting {step}...", file=sys.stderr, flush=True),
            on_apiserver=nodes_keep_their_leases,
        )
    except (ControlPlaneError, NoFreePort) as exc:
        if agents:
            agents[0].stop()
        print(f"the local cluster did not start: {exc}", file=sys.stderr)
        return 1
    (agent,) = agents
    try:
        agent.start()
        _serve_until_stopped(args, plane, agent.cluster, profile)
    finally:
        agent.stop()
        plane.stop()
    print("SANDBOX STOPPED", flush=True)
    return 0


def _run_with_kwok(args: argparse.Namespace, plane: ControlPlane, profile: dict[str, Any]) -> int:
    """The control plane with the profile's nodes run by KWOK (``sandbox.nodes.kwok``): no
    node simulation, no GPU Operator, and ``/metrics`` without GPUs."""
    try:
        plane.start(on_step=lambda step: print(f"starting {step}...", file=sys.stderr, flush=True))
        print("starting KWOK...", file=sys.stderr, flush=True)
        plane.start_kwok(KWOK_SELECTOR)
    except (ControlPlaneError, NoFreePort) as exc:
        print(f"the local cluster did not start: {exc}", file=sys.stderr)
        return 1
    try:
        api_client = k8s_config.new_client_from_config(str(plane.admin_kubeconfig))
        register_kwok_nodes(api_client, profile, args.seed, plane.versions["KUBERNETES"])
        _serve_until_stopped(args, plane, None, profile)
    finally:
        plane.stop()
    print("SANDBOX STOPPED", flush=True)
    return 0


def _serve_until_stopped(
    args: argparse.Namespace, plane: ControlPlane, cluster: Cluster | None, profile: dict[str, Any]
) -> None:
    """Serve ``/metrics`` (the simulated GPUs', none without them), announce the cluster
    ready, and wait for SIGTERM or SIGINT."""
    # Below the ephemeral range, as the control plane's: a restart asks for it again.
    metrics = MetricsServer((args.host, args.metrics_port or free_port(args.host)), cluster)
    threading.Thread(
        target=metrics.serve_forever, kwargs={"poll_interval": 0.2}, daemon=True
    ).start()
    try:
        _announce(args, plane, metrics, profile.get("name", args.profile))
        done = threading.Event()
        signal.signal(signal.SIGTERM, lambda *_: done.set())
        signal.signal(signal.SIGINT, lambda *_: done.set())
        done.wait()
    finally:
        metrics.shutdown()
        metrics.server_close()


def _agent(
    args: argparse.Namespace,
    plane: ControlPlane,
    folder: Path,
    profile: dict[str, Any],
    fault_rates: dict[str, Any] | None,
) -> NodeAgent:
    """The simulated nodes, reaching the API server with the admin kubeconfig, their kubelet
    API served with the control plane's kubelet certificate."""
    assert plane.pki is not None and plane.ports is not None
    api_client = k8s_config.new_client_from_config(str(plane.admin_kubeconfig))
    tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    tls.load_cert_chain(plane.pki.path("kubelet.crt"), plane.pki.path("kubelet.key"))
    options = Options(
        token=args.token,
        seed=args.seed,
        speed=args.speed,
        event_ttl=args.event_ttl,
        default_training_seconds=args.default_duration,
        faults=fault_rates,
        workdir=str(folder / "nodes"),
    )
    return NodeAgent(
        api_client=api_client,
        state=folder,
        profile=profile,
        options=options,
        net=plane.ports.service_net,
        kubelet_port=_kept_port(folder / "kubelet-port", args.host),
        kubelet_tls=tls,
        kubelet_version=plane.versions["KUBERNETES"],
    )


def _kept_port(path: Path, host: str) -> int:
    """The kubelets' port, kept across restarts (the nodes' status names it)."""
    if path.exists():
        return int(path.read_text())
    port = free_port(host)
    path.write_text(str(port))
    return port


def _announce(
    args: argparse.Namespace, plane: ControlPlane, metrics: MetricsServer, profile: str
) -> None:
    assert plane.ports is not None and plane.pki is not None
    metrics_url = f"http://{args.host}:{metrics.server_address[1]}/metrics"
    kubeconfig = Path(args.kubeconfig)
    kubeconfig.parent.mkdir(parents=True, exist_ok=True)
    # Where the simulated nodes take fault injections (``python -m sandbox fault``): a
    # kubeconfig extension, which kubectl and the client libraries ignore.
    config = yaml.safe_load(plane.admin_kubeconfig.read_text())
    config["clusters"][0]["cluster"]["extensions"] = [
        {
            "name": FAULTS_EXTENSION,
            "extension": {"faults": metrics_url.removesuffix("/metrics") + "/sandbox/faults"},
        }
    ]
    kubeconfig.write_text(yaml.safe_dump(config, sort_keys=False))
    info = {
        "api_port": plane.ports.apiserver,
        "metrics_port": metrics.server_address[1],
        "api_url": plane.url,
        "metrics_url": metrics_url,
        "kubeconfig": str(kubeconfig),
        "ca_file": str(plane.pki.ca_file),
        "token": args.token,
        "pid": os.getpid(),
        "control_plane": "real",
    }
    if args.ports_file:
        tmp = Path(args.ports_file + ".tmp")
        tmp.write_text(json.dumps(info))
        tmp.replace(args.ports_file)
    print(
        f"SANDBOX READY api={plane.url} metrics={metrics_url} kubeconfig={kubeconfig} "
        f"profile={profile} speed={args.speed}",
        flush=True,
    )
