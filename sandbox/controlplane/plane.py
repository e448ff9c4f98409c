"""Start and stop the real control plane on loopback.

1. ``localcluster/build.sh`` gives the binaries, CRDs and rendered manifests (cached; built
   once per machine and version).
2. The certificates (``pki.make_pki``) and the ports are made once into the state folder and
   kept, so a restart with the same ``--state`` resumes: etcd's data, the CA the kubeconfig
   names, the same addresses.
3. etcd, then kube-apiserver (a static token for the admin, as the old sandbox's kubeconfig
   had; client certificates for the rest), then kube-controller-manager and kube-scheduler.
4. The CRDs, then Kueue, JobSet, Trainer and the training operator, each serving its
   webhooks on loopback with the local CA in its webhook configurations (no cert-manager);
   leader election off. Kueue's visibility API is an aggregated API: its Service gets a
   loopback ClusterIP (the service range is in 127.0.0.0/8) that Kueue's visibility server
   binds, so the API server reaches it as it would in a cluster.
5. Trainer's ClusterTrainingRuntimes once its webhook answers.

Every process's output goes to ``<state>/log/<name>.log``. ``stop()`` ends what this started
and nothing else.
"""

from __future__ import annotations

import base64
import contextlib
import functools
import json
import logging
import os
import random
import shutil
import signal
import ssl
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from sandbox.children import with_parent
from sandbox.controlplane.pki import Pki, make_pki
from sandbox.controlplane.ports import free_port, port_free
from sandbox.controlplane.relay import Relay
from sandbox.nodes.volumes import storage_class

logger = logging.getLogger(__name__)

REPO = Path(__file__).resolve().parents[2]
INIT_CONTAINER_TEMPLATE = REPO / "localcluster" / "pytorch-init-container.yaml"
ADMIN_USER = "gpu-portal-admin"
CLUSTER_NAME = "local"
# Grace periods of the node-lifecycle controller and the default tolerations of pods for a
# node that is not ready or unreachable: short, so a node failure shows within seconds (a
# production cluster uses 40 s and 300 s). Documented in sandbox/README.md.
NODE_MONITOR_GRACE_SECONDS = 8
NODE_MONITOR_PERIOD_SECONDS = 2
DEFAULT_TOLERATION_SECONDS = 10
KUEUE_FRAMEWORKS = (
    "batch/job",
    "jobset.x-k8s.io/jobset",
    "kubeflow.org/pytorchjob",
    "trainer.kubeflow.org/trainjob",
    "pod",
    "deployment",
)
# The training operator's CRDs the cluster installs: the schemes it runs (``--enable-scheme``).
SERVED_KUBEFLOW_CRDS = frozenset({"kubeflow.org_pytorchjobs.yaml"})
# The webhook servers' certificate folder controller-runtime reads by default, under
# os.TempDir(): each manager gets its own TMPDIR holding our certificate.
CERT_SUBDIR = Path("k8s-webhook-server/serving-certs")
# The training operator always runs its own cert rotation: it writes them to a Secret, which
# in a cluster the kubelet mounts at this fixed folder; here the folder is a private one
# (a bind mount in a mount namespace of its own) that this launcher fills from the Secret.
OPERATOR_CERT_DIR = Path("/tmp/k8s-webhook-server/serving-certs")  # noqa: S108 - its fixed path


class ControlPlaneError(RuntimeError):
    pass


def build_components(what: str = "cluster") -> Path:
    """The folder with ``bin/``, ``crds/`` and ``manifests/`` (built when missing); with
    ``what="kwok"``, KWOK's ``bin/`` and ``stages/``."""
    done = subprocess.run(
        ["bash", str(REPO / "localcluster" / "build.sh"), what],
        stdout=subprocess.PIPE,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        raise ControlPlaneError("building the local cluster's components failed (see above)")
    return Path(done.stdout.strip().splitlines()[-1])


def _listening(port: int, host: str = "127.0.0.1") -> bool:
    return not port_free(port, host)


@dataclass
class Ports:
    """Every address the control plane listens on; kept in the state so a restart reuses them."""

    apiserver: int
    etcd: int
    etcd_peer: int
    kueue_webhook: int
    jobset_webhook: int
    trainer_webhook: int
    operator_webhook: int
    visibility: int
    # 127.<net>.0.0/16: the Service ClusterIP range. Nothing is served on ClusterIPs here
    # (no kube-proxy); the range is on loopback so that a stray connection stays on the machine.
    service_net: int

    @property
    def service_cidr(self) -> str:
        return f"127.{self.service_net}.0.0/16"

    @classmethod
    def load_or_choose(cls, path: Path, apiserver: int) -> Ports:
        """The ports kept in ``path`` where still free (others chosen anew), ``apiserver``
        when given. The service range is kept whatever happens: etcd holds ClusterIPs in it."""
        kept: dict[str, int] = json.loads(path.read_text()) if path.exists() else {}
        chosen: dict[str, int] = {}
        for name in cls.__dataclass_fields__:
            if name == "service_net":
                chosen[name] = kept.get(name) or random.SystemRandom().randint(100, 250)
            elif name == "apiserver" and apiserver:
                chosen[name] = apiserver
            else:
                port = kept.get(name)
                chosen[name] = port if port and port_free(port) else free_port()
        path.write_text(json.dumps(chosen))
        return cls(**chosen)


def kubeconfig(
    server: str, token: str, ca_pem: bytes, namespace: str = "default"
) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": CLUSTER_NAME,
                "cluster": {
                    "server": server,
                    "certificate-authority-data": base64.b64encode(ca_pem).decode(),
                },
            }
        ],
        "users": [{"name": ADMIN_USER, "user": {"token": token}}],
        "contexts": [
            {
                "name": CLUSTER_NAME,
                "context": {"cluster": CLUSTER_NAME, "user": ADMIN_USER, "namespace": namespace},
            }
        ],
        "current-context": CLUSTER_NAME,
        "preferences": {},
    }


@dataclass
class Process:
    name: str
    popen: subprocess.Popen[bytes]
    log: Path


@dataclass
class ControlPlane:
    state: Path
    token: str
    apiserver_port: int = 0
    components: Path | None = None
    processes: list[Process] = field(default_factory=list)
    ports: Ports | None = None
    pki: Pki | None = None
    _relays: list[Relay] = field(default_factory=list)

    @property
    def url(self) -> str:
        assert self.ports is not None
        return f"https://127.0.0.1:{self.ports.apiserver}"

    @property
    def admin_kubeconfig(self) -> Path:
        return self.state / "admin.kubeconfig"

    @property
    def versions(self) -> dict[str, str]:
        text = (REPO / "localcluster" / "versions.env").read_text()
        return dict(
            line.split("=", 1) for line in text.splitlines() if line and not line.startswith("#")
        )

    # -- start ---------------------------------------------------------------------------

    def start(
        self,
        *,
        on_step: Callable[[str], None] = lambda _: None,
        on_apiserver: Callable[[], None] = lambda: None,
    ) -> None:
        """Start every component in order; ``on_apiserver`` runs once the API server answers,
        before the controllers (the nodes' heartbeats start there)."""
        self.state.mkdir(parents=True, exist_ok=True)
        (self.state / "log").mkdir(exist_ok=True)
        self.components = self.components or build_components()
        _end_leftovers(self.state / "pids")
        self.pki = make_pki(self.state / "pki")
        self.ports = Ports.load_or_choose(self.state / "ports.json", self.apiserver_port)
        (self.state / "tokens.csv").write_text(
            f"{self.token},{ADMIN_USER},{ADMIN_USER},system:masters\n"
        )
        self.admin_kubeconfig.write_text(
            yaml.safe_dump(kubeconfig(self.url, self.token, self.pki.ca_pem), sort_keys=False)
        )
        try:
            on_step("etcd")
            self._start_etcd()
            on_step("kube-apiserver")
            self._start_apiserver()
            on_apiserver()
            on_step("kube-controller-manager, kube-scheduler")
            self._start_controllers()
            on_step("CRDs")
            self._install_crds()
            on_step("Kueue, JobSet, Trainer, training operator")
            self._start_managers()
            self._install_after_managers()
        except BaseException:
            self.stop()
            raise

    def start_kwok(self, annotation_selector: str) -> None:
        """KWOK, managing the nodes that carry ``annotation_selector`` (``sandbox.nodes.kwok``);
        stopped with the rest. Its own server (logs, exec: none here) on a loopback port."""
        kwok = build_components("kwok")
        stages = sorted((kwok / "stages").glob("*.yaml"))
        self._spawn(
            "kwok",
            [
                str(kwok / "bin" / "kwok"),
                f"--kubeconfig={self.admin_kubeconfig}",
                f"--manage-nodes-with-annotation-selector={annotation_selector}",
                f"--server-address=127.0.0.1:{free_port()}",
                *(f"--config={stage}" for stage in stages),
            ],
        )

    def _bin(self, name: str) -> str:
        assert self.components is not None
        return str(self.components / "bin" / name)

    def _spawn(self, name: str, argv: list[str], env: dict[str, str] | None = None) -> Process:
        log = self.state / "log" / f"{name}.log"
        with open(log, "ab") as out:
            popen = subprocess.Popen(
                with_parent(argv),
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env={**os.environ, "NO_PROXY": "127.0.0.1,localhost", **(env or {})},
                cwd=self.state,
                start_new_session=True,  # Ctrl-C in a terminal reaches us, and we stop them
            )
        process = Process(name, popen, log)
        self.processes.append(process)
        with open(self.state / "pids", "a") as pids:
            pids.write(f"{popen.pid}\n")
        return process

    def _wait(self, process: Process, ready: Callable[[], bool], timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if process.popen.poll() is not None:
                tail = _tail(process.log)
                raise ControlPlaneError(
                    f"{process.name} exited ({process.popen.returncode}):{_hint(tail)}\n{tail}"
                )
            try:
                if ready():
                    return
            except OSError:
                pass
            time.sleep(0.1)
        raise ControlPlaneError(
            f"{process.name} not ready after {timeout:.0f}s:\n{_tail(process.log)}"
        )

    def _start_etcd(self) -> None:
        ports = self.ports
        assert ports is not None
        client = f"http://127.0.0.1:{ports.etcd}"
        peer = f"http://127.0.0.1:{ports.etcd_peer}"
        etcd = self._spawn(
            "etcd",
            [
                self._bin("etcd"),
                f"--data-dir={self.state / 'etcd'}",
                f"--listen-client-urls={client}",
                f"--advertise-client-urls={client}",
                f"--listen-peer-urls={peer}",
                f"--initial-advertise-peer-urls={peer}",
                f"--initial-cluster=default={peer}",
                "--unsafe-no-fsync",  # as envtest: a test cluster needs no durability per write
                "--quota-backend-bytes=4294967296",
                "--log-level=warn",
            ],
        )
        self._wait(etcd, lambda: _http_ok(f"{client}/health"))

    def _start_apiserver(self) -> None:
        ports, pki = self.ports, self.pki
        assert ports is not None and pki is not None
        p = pki.path
        apiserver = self._spawn(
            "kube-apiserver",
            [
                self._bin("kube-apiserver"),
                f"--etcd-servers=http://127.0.0.1:{ports.etcd}",
                "--bind-address=127.0.0.1",
                "--advertise-address=127.0.0.1",
                f"--secure-port={ports.apiserver}",
                f"--tls-cert-file={p('apiserver.crt')}",
                f"--tls-private-key-file={p('apiserver.key')}",
                f"--client-ca-file={pki.ca_file}",
                f"--token-auth-file={self.state / 'tokens.csv'}",
                "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
                f"--service-account-key-file={p('sa.pub')}",
                f"--service-account-signing-key-file={p('sa.key')}",
                f"--service-cluster-ip-range={ports.service_cidr}",
                "--authorization-mode=Node,RBAC",
                # Kubelets (the simulated nodes) are reached on their loopback InternalIP.
                "--kubelet-preferred-address-types=InternalIP",
                f"--kubelet-client-certificate={p('apiserver-kubelet-client.crt')}",
                f"--kubelet-client-key={p('apiserver-kubelet-client.key')}",
                # The "kubernetes" Service's endpoints would be 127.0.0.1, which Endpoints
                # validation refuses; nothing in the cluster calls the API through it.
                "--endpoint-reconciler-type=none",
                f"--proxy-client-cert-file={p('apiserver-kubelet-client.crt')}",
                f"--proxy-client-key-file={p('apiserver-kubelet-client.key')}",
                f"--requestheader-client-ca-file={pki.ca_file}",
                "--requestheader-allowed-names=kube-apiserver-kubelet-client",
                "--requestheader-username-headers=X-Remote-User",
                "--requestheader-group-headers=X-Remote-Group",
                "--requestheader-extra-headers-prefix=X-Remote-Extra-",
                f"--default-not-ready-toleration-seconds={DEFAULT_TOLERATION_SECONDS}",
                f"--default-unreachable-toleration-seconds={DEFAULT_TOLERATION_SECONDS}",
                "--event-ttl=1h",
                "--profiling=false",
                "--v=0",
            ],
        )
        context = ssl.create_default_context(cafile=str(pki.ca_file))
        headers = {"Authorization": f"Bearer {self.token}"}
        self._wait(apiserver, lambda: _http_ok(f"{self.url}/readyz", context, headers), timeout=90)

    def _start_controllers(self) -> None:
        assert self.pki is not None
        kubeconfig_file = str(self.admin_kubeconfig)
        self._spawn(
            "kube-controller-manager",
            [
                self._bin("kube-controller-manager"),
                f"--kubeconfig={kubeconfig_file}",
                "--leader-elect=false",
                "--secure-port=0",
                f"--root-ca-file={self.pki.ca_file}",
                f"--service-account-private-key-file={self.pki.path('sa.key')}",
                "--use-service-account-credentials=false",
                f"--node-monitor-grace-period={NODE_MONITOR_GRACE_SECONDS}s",
                f"--node-monitor-period={NODE_MONITOR_PERIOD_SECONDS}s",
                # No cloud, no node CIDRs (the simulated kubelets give pods loopback IPs),
                # and no Service routing (no kube-proxy): Endpoints and EndpointSlices may not
                # hold loopback addresses, so their controllers would only log refusals.
                "--allocate-node-cidrs=false",
                "--controllers=*,-service-lb-controller,-node-ipam-controller,"
                "-node-route-controller,-cloud-node-lifecycle-controller,"
                "-persistentvolume-expander-controller,-endpoints-controller,"
                "-endpointslice-controller,-endpointslice-mirroring-controller",
                "--kube-api-qps=100",
                "--kube-api-burst=200",
                "--v=1",
            ],
        )
        self._spawn(
            "kube-scheduler",
            [
                self._bin("kube-scheduler"),
                f"--kubeconfig={kubeconfig_file}",
                f"--authentication-kubeconfig={kubeconfig_file}",
                f"--authorization-kubeconfig={kubeconfig_file}",
                "--leader-elect=false",
                "--secure-port=0",
                "--v=1",
            ],
        )

    def kubectl(self, *args: str, stdin: str | None = None, check: bool = True) -> str:
        done = subprocess.run(
            [_kubectl(), f"--kubeconfig={self.admin_kubeconfig}", *args],
            input=stdin,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        if check and done.returncode != 0:
            raise ControlPlaneError(f"kubectl {' '.join(args)}: {done.stderr.strip()}")
        return done.stdout

    def apply(self, documents: Iterable[dict[str, Any]]) -> None:
        docs = [d for d in documents if d]
        if docs:
            self._server_side_apply(
                "-", stdin=yaml.dump_all(docs, Dumper=yaml.CSafeDumper, sort_keys=False)
            )

    def _server_side_apply(self, *sources: str, stdin: str | None = None) -> None:
        """``kubectl apply --server-side`` of files, folders, or ``-`` (``stdin``)."""
        self.kubectl(
            "apply",
            "--server-side",
            "--force-conflicts",
            "--field-manager=gpu-portal-localcluster",
            *(arg for source in sources for arg in ("-f", source)),
            stdin=stdin,
        )

    def _install_crds(self) -> None:
        """The components' CRDs, given to kubectl as the files they are (8 MB of YAML that
        PyYAML took 10-20 s of CPU to read and write again at every start). Of the training
        operator's, only PyTorchJob's: the operator runs that scheme alone, and its other
        five CRDs (MPI, TF, XGBoost, Paddle, JAX jobs: 2.9 MB of schemas) cost the API server
        CPU at every start for kinds nothing here serves."""
        assert self.components is not None
        files = sorted(
            path
            for path in (self.components / "crds").glob("*.yaml")
            if not path.name.startswith("kubeflow.org_") or path.name in SERVED_KUBEFLOW_CRDS
        )
        self._server_side_apply(*(str(path) for path in files))
        self.kubectl("wait", "--for=condition=Established", "--timeout=60s", "crd", "--all")

    def _manifests(self, name: str) -> list[dict[str, Any]]:
        assert self.components is not None
        path = self.components / "manifests" / f"{name}.yaml"
        return [d for d in yaml.load_all(path.read_text(), Loader=yaml.CSafeLoader) if d]

    def _webhooks(self, name: str, port: int) -> list[dict[str, Any]]:
        """A component's webhook configurations, calling it on loopback with our CA."""
        assert self.pki is not None
        ca = base64.b64encode(self.pki.ca_pem).decode()
        out = []
        for doc in self._manifests(f"{name}-webhooks"):
            if not doc["kind"].endswith("WebhookConfiguration"):
                continue
            doc["metadata"]["name"] = f"{name}-{doc['metadata']['name']}"
            for hook in doc.get("webhooks", []):
                path = hook["clientConfig"]["service"].get("path", "/")
                hook["clientConfig"] = {"url": f"https://127.0.0.1:{port}{path}", "caBundle": ca}
            out.append(doc)
        return out

    def _certdir_env(self, name: str) -> dict[str, str]:
        """A TMPDIR of the manager's own with the webhooks' certificate where
        controller-runtime looks for it."""
        assert self.pki is not None
        tmp = self.state / "tmp" / name
        certs = tmp / CERT_SUBDIR
        certs.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(self.pki.path("webhooks.crt"), certs / "tls.crt")
        shutil.copyfile(self.pki.path("webhooks.key"), certs / "tls.key")
        shutil.copyfile(self.pki.ca_file, certs / "ca.crt")
        return {"TMPDIR": str(tmp)}

    def _start_managers(self) -> None:
        self.apply(
            [
                *(
                    {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}
                    for ns in ("kueue-system", "jobset-system", "kubeflow-system", "kubeflow")
                ),
                storage_class(),
            ]
        )
        self._start_kueue()
        self._start_jobset()
        self._start_trainer()
        self._start_training_operator()

    def _start_kueue(self) -> None:
        ports = self.ports
        assert ports is not None
        kubeconfig_file = str(self.admin_kubeconfig)
        kueue_tmp = self._certdir_env("kueue")
        kueue_config = {
            "apiVersion": "config.kueue.x-k8s.io/v1beta2",
            "kind": "Configuration",
            "namespace": "kueue-system",
            "health": {"healthProbeBindAddress": "0"},
            "metrics": {"bindAddress": "0"},
            "webhook": {
                "port": ports.kueue_webhook,
                "host": "127.0.0.1",
                "certDir": str(Path(kueue_tmp["TMPDIR"]) / CERT_SUBDIR),
            },
            "leaderElection": {"leaderElect": False},
            "internalCertManagement": {"enable": False},
            "clientConnection": {"qps": 100, "burst": 200},
            # As Kueue ships it (config/components/manager/controller_manager_config.yaml):
            # without it each reconciler has one worker, and under a few hundred waiting
            # Workloads an admitted Job waited ~40 s to be unsuspended (bench_admission_kueue).
            "controller": {
                "groupKindConcurrency": {
                    "Job.batch": 5,
                    "Pod": 5,
                    "Workload.kueue.x-k8s.io": 5,
                    "LocalQueue.kueue.x-k8s.io": 1,
                    "Cohort.kueue.x-k8s.io": 1,
                    "ClusterQueue.kueue.x-k8s.io": 1,
                    "ResourceFlavor.kueue.x-k8s.io": 1,
                }
            },
            # v1beta2 has no fairSharing.enable: the section's presence turns it on.
            "fairSharing": {
                "preemptionStrategies": ["LessThanOrEqualToFinalShare", "LessThanInitialShare"]
            },
            "visibilityServer": {"bindAddress": "127.0.0.1"},
            "integrations": {"frameworks": list(KUEUE_FRAMEWORKS)},
        }
        (self.state / "kueue-config.yaml").write_text(yaml.safe_dump(kueue_config))
        self.apply(self._webhooks("kueue", ports.kueue_webhook))
        kueue_certs = Path(kueue_tmp["TMPDIR"]) / CERT_SUBDIR
        kueue_etc = Path(kueue_tmp["TMPDIR"]) / "etc-kueue"
        shutil.copytree(kueue_certs, kueue_etc / "metrics" / "certs", dirs_exist_ok=True)
        self._spawn(
            "kueue",
            _with_private_dirs(
                [
                    self._bin("kueue"),
                    f"--config={self.state / 'kueue-config.yaml'}",
                    f"--kubeconfig={kubeconfig_file}",
                    f"--visibility-server-port={ports.visibility}",
                    "--zap-log-level=info",
                ],
                {
                    Path("/etc/kueue"): kueue_etc,
                    # Its APIService skips TLS verification (as shipped): any cert serves.
                    Path("/visibility"): kueue_certs,
                },
            ),
            env=kueue_tmp,
        )

    def _start_jobset(self) -> None:
        ports = self.ports
        assert ports is not None
        kubeconfig_file = str(self.admin_kubeconfig)
        jobset_tmp = self._certdir_env("jobset")
        jobset_config = {
            "apiVersion": "config.jobset.x-k8s.io/v1alpha1",
            "kind": "Configuration",
            "leaderElection": {"leaderElect": False},
            "internalCertManagement": {"enable": False},
            "health": {"healthProbeBindAddress": "0"},
            "metrics": {"bindAddress": "0"},
            "webhook": {"port": ports.jobset_webhook, "host": "127.0.0.1"},
            "clientConnection": {"qps": 100, "burst": 200},
        }
        (self.state / "jobset-config.yaml").write_text(yaml.safe_dump(jobset_config))
        self.apply(self._webhooks("jobset", ports.jobset_webhook))
        self._spawn(
            "jobset",
            [
                self._bin("jobset"),
                f"--config={self.state / 'jobset-config.yaml'}",
                f"--kubeconfig={kubeconfig_file}",
            ],
            env=jobset_tmp,
        )

    def _start_trainer(self) -> None:
        ports = self.ports
        assert ports is not None
        kubeconfig_file = str(self.admin_kubeconfig)
        trainer_tmp = self._certdir_env("trainer")
        trainer_config = {
            "apiVersion": "config.trainer.kubeflow.org/v1alpha1",
            "kind": "Configuration",
            "health": {"healthProbeBindAddress": "0"},
            "metrics": {"bindAddress": "0", "secureServing": False},
            "webhook": {"port": ports.trainer_webhook, "host": "127.0.0.1"},
            "leaderElection": {"leaderElect": False},
            "certManagement": {"enable": False},
        }
        (self.state / "trainer-config.yaml").write_text(yaml.safe_dump(trainer_config))
        self.apply(self._webhooks("trainer", ports.trainer_webhook))
        self._spawn(
            "trainer",
            [
                self._bin("trainer-controller-manager"),
                f"--config={self.state / 'trainer-config.yaml'}",
                f"--kubeconfig={kubeconfig_file}",
            ],
            env=trainer_tmp,
        )

    def _start_training_operator(self) -> None:
        ports = self.ports
        assert ports is not None
        kubeconfig_file = str(self.admin_kubeconfig)
        # The training operator: its own cert rotation (a Secret in "kubeflow", the CA
        # injected into its webhook configuration), for the name training-operator.kubeflow.svc,
        # which the API server resolves to the Service's loopback ClusterIP.
        operator_service = {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": "training-operator", "namespace": "kubeflow"},
            "spec": _to_loopback(ports.operator_webhook),
        }
        hooks = [
            d
            for d in self._manifests("training-operator-webhooks")
            if d["kind"].endswith("WebhookConfiguration")
        ]
        for doc in hooks:
            for hook in doc.get("webhooks", []):
                hook["clientConfig"]["service"].update(
                    namespace="kubeflow", name="training-operator", port=ports.operator_webhook
                )
        # The Secret its rotator fills (shipped empty, as in its manifests).
        cert_secret = {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": "training-operator-webhook-cert", "namespace": "kubeflow"},
        }
        existing = self.kubectl("get", "secret", "-n", "kubeflow", "-o", "name", check=False)
        fresh = [] if "training-operator-webhook-cert" in existing else [cert_secret]
        self.apply([operator_service, *fresh, *hooks])
        # It serves its webhooks on every interface (no flag chooses the address): it runs
        # in a network namespace of its own, joined to the cluster by relays (relay.py).
        sockets = self.state / "netns"
        sockets.mkdir(exist_ok=True)
        api_sock, hook_sock = sockets / "api.sock", sockets / "webhook.sock"
        self._relays = [
            Relay(f"unix:{api_sock}", f"tcp:127.0.0.1:{ports.apiserver}").start(),
            Relay(f"tcp:127.0.0.1:{ports.operator_webhook}", f"unix:{hook_sock}").start(),
        ]
        ready = sockets / "relays-ready"
        ready.unlink(missing_ok=True)
        inside = (
            f"{sys.executable} -m sandbox.controlplane.relay --ready={ready} "
            f"tcp:127.0.0.1:{ports.apiserver}=unix:{api_sock} "
            f"unix:{hook_sock}=tcp:127.0.0.1:{ports.operator_webhook}"
        )
        self._spawn(
            "training-operator",
            _with_private_dirs(
                [
                    self._bin("training-operator"),
                    f"--kubeconfig={kubeconfig_file}",
                    "--metrics-bind-address=0",
                    "--health-probe-bind-address=0",
                    f"--webhook-server-port={ports.operator_webhook}",
                    "--enable-scheme=pytorchjob",
                    "--leader-elect=false",
                    # Its workers' init container, restricted (the built-in one is refused
                    # in the teams' namespaces): the file says why.
                    f"--pytorch-init-container-template-file={INIT_CONTAINER_TEMPLATE}",
                ],
                {OPERATOR_CERT_DIR: self._operator_certs},
                network=inside,
            ),
            env={"MY_POD_NAMESPACE": "kubeflow", "PYTHONPATH": str(REPO)},
        )

    @property
    def _operator_certs(self) -> Path:
        folder = self.state / "tmp" / "training-operator" / "serving-certs"
        folder.mkdir(parents=True, exist_ok=True)
        return folder

    def _mount_operator_certs(self) -> None:
        """Do what the kubelet's Secret volume does for the training operator: its rotator
        writes the Secret, the files appear in its certificate folder."""
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            raw = self.kubectl(
                "get", "secret", "-n", "kubeflow", "training-operator-webhook-cert",
                "-o", "json", check=False,
            )  # fmt: skip
            data = (json.loads(raw).get("data") or {}) if raw else {}
            if {"tls.crt", "tls.key"} <= set(data):
                for name, value in data.items():
                    (self._operator_certs / name).write_bytes(base64.b64decode(value))
                return
            time.sleep(0.3)
        raise ControlPlaneError("the training operator wrote no webhook certificate in 60 s")

    def _install_after_managers(self) -> None:
        ports = self.ports
        assert ports is not None
        # Kueue's visibility API: its Service on the loopback ClusterIP its server binds.
        visibility = []
        for doc in self._manifests("kueue-visibility"):
            if doc["kind"] == "APIService":
                doc["spec"]["service"].update(
                    namespace="kueue-system", name="kueue-visibility-server", port=ports.visibility
                )
                visibility.append(doc)
        visibility.insert(
            0,
            {
                "apiVersion": "v1",
                "kind": "Service",
                "metadata": {"name": "kueue-visibility-server", "namespace": "kueue-system"},
                "spec": _to_loopback(ports.visibility),
            },
        )
        self.apply(visibility)
        self._mount_operator_certs()
        by_name = {p.name: p for p in self.processes}
        for name, port, host in (
            ("kueue", ports.kueue_webhook, "127.0.0.1"),
            ("jobset", ports.jobset_webhook, "127.0.0.1"),
            ("trainer", ports.trainer_webhook, "127.0.0.1"),
            ("training-operator", ports.operator_webhook, "127.0.0.1"),
            ("kueue", ports.visibility, "127.0.0.1"),
        ):
            self._wait(by_name[name], functools.partial(_listening, port, host), timeout=90)
        # The runtimes go through Trainer's validating webhook, so they come last; a webhook
        # listening is not yet a webhook serving, so this is retried for a while.
        runtimes = self._manifests("trainer-runtimes")
        deadline = time.monotonic() + 60
        while True:
            try:
                self.apply(runtimes)
                break
            except ControlPlaneError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.5)

    # -- stop ----------------------------------------------------------------------------

    def stop(self, timeout: float = 10) -> None:
        """SIGTERM everything this started (managers first, etcd last), then SIGKILL."""
        for process in reversed(self.processes):
            if process.popen.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(process.popen.pid, signal.SIGTERM)
        deadline = time.monotonic() + timeout
        for process in reversed(self.processes):
            try:
                process.popen.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(process.popen.pid, signal.SIGKILL)
                process.popen.wait()
        self.processes.clear()
        for relay in self._relays:
            relay.close()
        self._relays = []


def _end_leftovers(pids: Path, timeout: float = 15) -> None:
    """End what an earlier run on this state left running (its launcher was killed with
    SIGKILL: the components got SIGTERM and may still be shutting down, holding etcd's data
    and their ports). Only processes whose command line names this state folder."""
    if not pids.exists():
        return
    alive = []
    for line in pids.read_text().split():
        cmdline = Path(f"/proc/{line}/cmdline")
        try:
            if str(pids.parent) in cmdline.read_bytes().decode(errors="replace"):
                alive.append(int(line))
        except OSError:
            continue
    for pid in alive:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while alive and time.monotonic() < deadline:
        alive = [pid for pid in alive if Path(f"/proc/{pid}").exists()]
        time.sleep(0.1)
    for pid in alive:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pid, signal.SIGKILL)
    pids.unlink()


def _to_loopback(port: int) -> dict[str, Any]:
    """A Service spec the API server resolves to localhost:``port``: the webhooks and the
    aggregated API of managers that run out of cluster. (A ClusterIP Service needs
    EndpointSlices, whose addresses may not be loopback ones; an ExternalName Service is
    dialled by name, and its port is the one asked for.)"""
    return {"type": "ExternalName", "externalName": "localhost", "ports": [{"port": port}]}


def _with_private_dirs(
    argv: list[str], dirs: dict[Path, Path], network: str | None = None
) -> list[str]:
    """``argv`` run in a mount namespace of its own where each fixed folder the program
    insists on (a key of ``dirs``) is the given folder of this cluster's state, bind-mounted.

    Kueue reads its metrics certificate from /etc/kueue/metrics/certs and its visibility
    server's from /visibility; the training operator reads its webhook certificates from
    /tmp/k8s-webhook-server/serving-certs. Several local clusters on one machine (the test
    processes) must not share them. The mount points are made, empty, on the host once.

    With ``network`` (a command started in the background first, the relays), it also gets
    a network namespace of its own with only its loopback up.
    """
    script = []
    if network:
        ready = network.split("--ready=", 1)[1].split()[0] if "--ready=" in network else ""
        script += ["ip link set lo up", f"{{ {network} & }}"]
        if ready:
            script.append(f"while [ ! -e '{ready}' ]; do sleep 0.05; done")
    for target, source in dirs.items():
        target.mkdir(parents=True, exist_ok=True)
        script.append(f"mount --bind '{source}' '{target}'")
    script.append('exec "$0" "$@"')
    namespaces = ["--mount", "--net"] if network else ["--mount"]
    return ["unshare", *namespaces, "--propagation=private", "sh", "-c", " && ".join(script), *argv]


def _kubectl() -> str:
    for candidate in (REPO / ".venv" / "bin" / "kubectl", shutil.which("kubectl")):
        if candidate and Path(candidate).exists():
            return str(candidate)
    raise ControlPlaneError("kubectl not found: run `python scripts/install_kube_tools.py`")


def _http_ok(
    url: str, context: ssl.SSLContext | None = None, headers: dict[str, str] | None = None
) -> bool:
    request = urllib.request.Request(url, headers=headers or {})  # noqa: S310 - http(s) only
    try:
        with urllib.request.urlopen(request, timeout=2, context=context) as response:  # noqa: S310
            return bool(response.status == 200)
    except OSError:
        return False


INOTIFY_LIMIT = Path("/proc/sys/fs/inotify/max_user_instances")


def _hint(log: str) -> str:
    """What a component's dying words mean when they are not plain: "too many open files"
    from a Go component here is nearly always inotify instances used up (its certificate and
    config watchers), not file descriptors."""
    if "too many open files" not in log:
        return ""
    try:
        limit = INOTIFY_LIMIT.read_text().strip()
    except OSError:
        limit = "unknown"
    return (
        f" the machine's inotify instances are used up (fs.inotify.max_user_instances = "
        f"{limit}; a local cluster takes about 14). Raise it: "
        "sudo sysctl -w fs.inotify.max_user_instances=1024"
    )


def _tail(path: Path, size: int = 3000) -> str:
    return path.read_text(errors="replace")[-size:] if path.exists() else ""
