"""The simulated GPU nodes: what the kubelets and the device plugins of a profile's nodes do,
through the real API server only.

1. Each node of the profile is registered (``POST /api/v1/nodes``) with its GPU capacity,
   NFD/GFD labels and taints, a loopback InternalIP of its own and the kubelet port; its
   status says Ready. A restart keeps the nodes there (and their devices, in the state).
2. Each node's Lease in ``kube-node-lease`` is renewed every 2 s while the node is up, from
   the moment the API server answers (before the controllers start, on a restart); a
   node that goes down (``sandbox.faults``) stops renewing, and the real node-lifecycle
   controller marks it NotReady, taints it and evicts its pods. A node that comes back
   reports Ready again, as a kubelet's status sync does.
3. The pods the real scheduler binds to these nodes are run by ``sandbox.nodes.kubelet``
   on the watch-fed cache (``NodeStore``): devices assigned, containers started, simulated
   work with its duration and exit code, restarts by restart policy, real JupyterLab and
   code-server processes for workspace images, termination on deletion. A TrainJob's rank
   0 reports its progress as Trainer's status server would write it (``trainer_status``).
5. Claims of the default StorageClass get volumes (``volumes``), as a provisioner's would.
4. ``kubectl logs`` reaches each node's kubelet API (``kubelet_api``) through the API server.
"""

from __future__ import annotations

import datetime as dt
import logging
import ssl
import threading
import time
from pathlib import Path
from typing import Any

from kubernetes import client as k8s
from kubernetes.client.rest import ApiException

from sandbox import faults
from sandbox.gpu_operator_install import CLUSTER_POLICY, CLUSTER_POLICY_KEY, operator_objects
from sandbox.nodes import faultplan, gpu_operands, kubelet, volumes
from sandbox.nodes.kubelet_api import KubeletServer, serve
from sandbox.nodes.kubelet_api import stop as stop_servers
from sandbox.nodes.store import BY_KEY, Api, NodeStore, Resource
from sandbox.nodes.trainer_status import TrainerStatus
from sandbox.profiles import build_nodes, registrable
from sandbox.state import Cluster, Options
from sandbox.store import Obj

log = logging.getLogger("sandbox.nodes")
LEASE_NAMESPACE = "kube-node-lease"
LEASE_SECONDS = 40  # the kubelet's default nodeLeaseDurationSeconds
# A kubelet renews every 10 s (a quarter of the lease); here the node-lifecycle controller's
# grace period is 8 s (sandbox.controlplane.plane), so the leases are renewed every 2 s.
RENEW_SECONDS = 2.0
TICK_SECONDS = 0.1


class NodeCluster(Cluster):
    """The node side's view: the watch-fed cache, the simulated clock, and events posted to
    the API server (``record_event``) as a kubelet's recorder posts them."""

    def __init__(self, store: NodeStore, options: Options) -> None:
        super().__init__(store, options)
        self.node_store = store

    def record_event(
        self,
        obj: Obj,
        event_type: str,
        reason: str,
        message: str,
        component: str,
        *,
        action: str | None = None,
        host: str | None = None,
    ) -> Obj:
        meta = obj["metadata"]
        ns = meta.get("namespace") or "default"
        stamp = _now_rfc3339()
        event: Obj = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": f"{meta['name']}.{self.random_hex(16)}", "namespace": ns},
            "involvedObject": {
                "kind": obj.get("kind", "Pod"),
                "namespace": ns,
                "name": meta["name"],
                "uid": meta.get("uid", ""),
                "apiVersion": obj.get("apiVersion", "v1"),
            },
            "reason": reason,
            "message": message[:1024],
            "type": event_type,
            "source": {"component": component, **({"host": host} if host else {})},
            "reportingComponent": component,
            "reportingInstance": host or "",
            "firstTimestamp": stamp,
            "lastTimestamp": stamp,
            "count": 1,
        }
        if obj.get("kind") == "Node":
            event["involvedObject"].pop("namespace")
        try:
            created: Obj = self.node_store.api.call(
                "POST", f"/api/v1/namespaces/{ns}/events", event
            )
            return created
        except ApiException as exc:  # a namespace being deleted: its events go with it
            log.debug("event %s on %s/%s not recorded: %s", reason, ns, meta["name"], exc.reason)
            return event


def node_conditions(ts: str) -> list[dict[str, Any]]:
    """A healthy kubelet's node conditions (also what a node coming back reports)."""

    def cond(ctype: str, status: str, reason: str, message: str) -> dict[str, Any]:
        return {
            "type": ctype,
            "status": status,
            "lastHeartbeatTime": ts,
            "lastTransitionTime": ts,
            "reason": reason,
            "message": message,
        }

    return [
        cond(
            "MemoryPressure",
            "False",
            "KubeletHasSufficientMemory",
            "kubelet has sufficient memory available",
        ),
        cond("DiskPressure", "False", "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
        cond(
            "PIDPressure",
            "False",
            "KubeletHasSufficientPID",
            "kubelet has sufficient PID available",
        ),
        cond("Ready", "True", "KubeletReady", "kubelet is posting ready status"),
    ]


def _now_rfc3339() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _now_micro() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


# Where each kind the GPU Operator's install creates is posted (configmaps and the
# ClusterPolicy are the watched ones).
_INSTALLED = {
    "Namespace": Resource("namespaces", "", "v1", "namespaces", False),
    "ServiceAccount": Resource("serviceaccounts", "", "v1", "serviceaccounts", True),
    "ConfigMap": BY_KEY["configmaps"],
    "DaemonSet": Resource("daemonsets", "apps", "v1", "daemonsets", True),
    "ClusterPolicy": BY_KEY[CLUSTER_POLICY_KEY],
}


def node_address(net: int, index: int) -> str:
    """Node ``index``'s InternalIP: 127.<net>.<1 + index // 250>.<2 + index % 250>."""
    return f"127.{net}.{1 + index // 250}.{2 + index % 250}"


class NodeAgent:
    def __init__(
        self,
        *,
        api_client: k8s.ApiClient,
        state: Path,
        profile: dict[str, Any],
        options: Options,
        net: int,
        kubelet_port: int,
        kubelet_tls: ssl.SSLContext,
        kubelet_version: str,
        reset: bool = False,
    ) -> None:
        self.api = Api(api_client)
        self.root = Path(options.workdir)
        self.store = NodeStore(state / "nodes.sqlite3", self.api, reset=reset)
        self.cluster = NodeCluster(self.store, options)
        # Where simulated time resumes once the kubelets run (``start``): the agent is made
        # when the API server answers, and the pods' work must not age while the rest of
        # the control plane starts (a restart's run would end during it).
        self._resume_at = self.cluster.clock.now()
        self.profile = profile
        self.net = net
        self.kubelet_port = kubelet_port
        self.kubelet_tls = kubelet_tls
        self.kubelet_version = kubelet_version
        self.trainer_status = TrainerStatus(self.api)
        self.node_names: list[str] = []
        # Every node of the profile, registered yet or not: whose Leases to renew.
        self._profile_nodes = [
            spec.node["metadata"]["name"] for spec in build_nodes(profile, options.seed, "")
        ]
        self._renewed: dict[str, float] = {}
        # The Lease each node last wrote: renewed from it as the kubelet's lease controller
        # does (one PUT; a GET only on a conflict or a first renewal), which halves the idle
        # cluster's API traffic against a GET before every PUT.
        self._leases_held: dict[str, Obj] = {}
        self._servers: list[KubeletServer] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="kubelets", daemon=True)
        self._leases = threading.Thread(target=self._keep_leases, name="leases", daemon=True)

    # -- start / stop ---------------------------------------------------------------------
    def keep_leases(self) -> None:
        """Renew the nodes' Leases from now on, in a thread of their own (``start`` starts
        it too): a restarted cluster's nodes heartbeat before its node-lifecycle controller
        starts watching them, as kubelets that never stopped would."""
        if not self._leases.is_alive():
            self._leases.start()

    def start(self) -> None:
        self.keep_leases()
        self.cluster.clock.resume_from(self._resume_at)
        self.store.start()
        self._install_gpu_operator()
        self._register_nodes()
        self._thread.start()
        serve(self._servers)

    def stop(self) -> None:
        self._stop.set()
        for thread in (self._thread, self._leases):
            if thread.is_alive():
                thread.join(timeout=5)
        stop_servers(self._servers)
        self.store.stop()
        self.cluster.servers.stop_all()
        self.store.close()

    def _register_nodes(self) -> None:
        """Create the profile's nodes that are not there yet; every node's kubelet API."""
        created = _now_rfc3339()
        for index, spec in enumerate(build_nodes(self.profile, self.cluster.options.seed, created)):
            address = node_address(self.net, index)
            node = registrable(
                spec.node,
                provider="gpu-portal-local",
                address=address,
                kubelet_version=self.kubelet_version,
            )
            name = node["metadata"]["name"]
            node["status"]["daemonEndpoints"] = {"kubeletEndpoint": {"Port": self.kubelet_port}}
            node["status"]["conditions"] = node_conditions(_now_rfc3339())
            with self.store.lock:
                known = self.store.get("nodes", "", name)
                if self.store.meta_get(f"devices/{name}") is None:
                    self.store.meta_set(f"devices/{name}", [d.to_json() for d in spec.devices])
            if known is None:
                try:
                    registered = self.api.call("POST", "/api/v1/nodes", node)
                except ApiException as exc:
                    if exc.status != 409:
                        raise
                    registered = self.api.call("GET", f"/api/v1/nodes/{name}")
                registered["status"] = {**registered.get("status", {}), **node["status"]}
                with self.store.lock:
                    self.store.put("nodes", registered)
            self.node_names.append(name)
            self._servers.append(
                KubeletServer(
                    (address, self.kubelet_port),
                    name,
                    self.cluster,
                    self.kubelet_tls,
                    lambda n: faults.node_down(self.cluster, n),
                )
            )

    def _install_gpu_operator(self) -> None:
        """What the GPU Operator's Helm chart leaves, through the API, once: its ClusterPolicy
        already there means it was installed (an admin's later changes stay). The real
        DaemonSet controller then runs the operands on the nodes labelled for them."""
        policy = BY_KEY[CLUSTER_POLICY_KEY]
        if self.api.get(policy, "", CLUSTER_POLICY) is None:
            for obj in operator_objects(self.profile):
                try:
                    namespace = obj["metadata"].get("namespace", "")
                    self.api.call("POST", _INSTALLED[obj["kind"]].path(namespace), obj)
                except ApiException as exc:
                    if exc.status != 409:  # there from an install a restart cut short
                        raise
        # The operator's node side (MIG manager, device plugin, ClusterPolicy status) runs.
        with self.store.lock:
            self.store.meta_set("gpu_operator_installed", True)

    # -- the kubelets' loop ---------------------------------------------------------------
    def _run(self) -> None:
        while not self._stop.is_set():
            started = time.monotonic()
            try:
                self.run_once()
            except Exception:  # one bad pass must not stop the nodes
                log.exception("node pass failed")
            self._stop.wait(max(TICK_SECONDS, time.monotonic() - started))

    def run_once(self) -> None:
        for step in (
            lambda: kubelet.reconcile(self.cluster),
            lambda: gpu_operands.reconcile(self.cluster),
            lambda: faultplan.reconcile(self.cluster),
            lambda: volumes.reconcile(self.store, self.api, self.root),
            lambda: self.trainer_status.reconcile(self.cluster),
        ):
            with self.store.lock:
                step()

    def _keep_leases(self) -> None:
        while not self._stop.wait(TICK_SECONDS):
            try:
                self._heartbeats()
            except Exception:  # the API server restarting: the next tick tries again
                log.exception("node heartbeats failed")

    def _heartbeats(self) -> None:
        """Renew each live node's Lease; a node back from being down reports Ready. Before
        the nodes are in the cache (a restart), the Leases there are renewed alone."""
        now = time.monotonic()
        for name in self._profile_nodes:
            with self.store.lock:
                down = faults.node_down(self.cluster, name)
                node = self.store.get("nodes", "", name)
            if down or now - self._renewed.get(name, 0.0) < RENEW_SECONDS:
                continue
            self._renewed[name] = now
            self._renew_lease(name, node)
            if node is None:
                continue
            ready: dict[str, Any] = next(
                (c for c in node["status"].get("conditions") or [] if c["type"] == "Ready"), {}
            )
            if ready.get("status") != "True":
                back = dict(node)
                back["status"] = {**node["status"], "conditions": node_conditions(_now_rfc3339())}
                with self.store.lock:
                    self.store.put("nodes", back)

    def _renew_lease(self, name: str, node: Obj | None) -> None:
        """Renew ``name``'s Lease; create it (owned by the node) when it is missing and the
        node is known."""
        path = f"/apis/coordination.k8s.io/v1/namespaces/{LEASE_NAMESPACE}/leases"
        lease: Obj = {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {
                "name": name,
                "namespace": LEASE_NAMESPACE,
                "ownerReferences": [
                    {
                        "apiVersion": "v1",
                        "kind": "Node",
                        "name": name,
                        "uid": (node or {}).get("metadata", {}).get("uid", ""),
                    }
                ],
            },
            "spec": {
                "holderIdentity": name,
                "leaseDurationSeconds": LEASE_SECONDS,
                "renewTime": _now_micro(),
            },
        }
        try:
            self._leases_held[name] = self._put_lease(path, name, lease["spec"])
        except ApiException as exc:
            self._leases_held.pop(name, None)
            if exc.status == 404 and node is not None:
                self._leases_held[name] = self.api.call("POST", path, lease)
            elif exc.status == 404:
                return  # a node not registered yet: its registration makes the Lease
            elif exc.status != 409:
                log.warning("lease of %s not renewed: %s", name, exc.reason)

    def _put_lease(self, path: str, name: str, spec: Obj) -> Obj:
        """PUT the renewed Lease from the one this node last wrote; on a conflict (someone
        else wrote it since) or with none held, from a fresh GET."""
        url = f"{path}/{name}"

        def renewed(held: Obj) -> Obj:
            return {**held, "spec": {**held.get("spec", {}), **spec}}

        held = self._leases_held.get(name) or self.api.call("GET", url)
        try:
            written: Obj = self.api.call("PUT", url, renewed(held))
        except ApiException as exc:
            if exc.status != 409:
                raise
            written = self.api.call("PUT", url, renewed(self.api.call("GET", url)))
        return written
