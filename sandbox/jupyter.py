"""Real JupyterLab servers for the pods of Jupyter images (the Jupyter Docker Stacks,
``quay.io/jupyter/<name>-notebook``): the kubelet runs ``jupyter-lab`` as a local process
instead of simulating the container.

Each such pod gets its own loopback address (``127.x.y.z``, from its uid) as its pod IP, so
many servers listen on the same container port, and the portal reaches it as it would a pod
in a cluster: pod IP and container port. The server takes the container's token
(``JUPYTER_TOKEN``, a value or a Secret's key), its ``--ServerApp.*`` /
``--IdentityProvider.*`` arguments (``base_url``), and serves the directory of the
PersistentVolumeClaim mounted at its home (``HOME``, else ``/home/jovyan``), kept under the
sandbox's state folder so that a stopped and started workspace finds its files. It listens
on its pod IP only, and dies with the sandbox (``PR_SET_PDEATHSIG``). Its output is the
container's log.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

Obj = dict[str, Any]
IMAGE = re.compile(r"(^|/)jupyter/[a-z0-9._-]+-notebook(:[\w.-]+)?(@sha256:[0-9a-f]+)?$")
DEFAULT_PORT = 8888
DEFAULT_HOME = "/home/jovyan"
PASSED_OPTIONS = ("--ServerApp.", "--IdentityProvider.", "--LabApp.")
PR_SET_PDEATHSIG = 1


def is_jupyter(pod: Obj) -> bool:
    """Whether the pod's (first) container is a Jupyter Docker Stacks image."""
    containers = (pod.get("spec") or {}).get("containers") or []
    return bool(containers) and bool(IMAGE.search(str(containers[0].get("image", ""))))


def pod_ip(uid: str) -> str:
    """The pod's own loopback address: 127.a.b.c from its uid (never 127.0.0.x)."""
    digest = hashlib.sha256(uid.encode()).digest()
    return f"127.{digest[0] % 254 + 1}.{digest[1]}.{digest[2] % 253 + 2}"


def container_port(pod: Obj) -> int:
    container = pod["spec"]["containers"][0]
    ports = container.get("ports") or []
    return int(ports[0]["containerPort"]) if ports else DEFAULT_PORT


@dataclass
class Server:
    uid: str
    process: subprocess.Popen[bytes]
    ip: str
    port: int
    base_url: str
    log: Path
    token: str = ""
    answering: threading.Event = field(default_factory=threading.Event)
    busy: threading.Event = field(default_factory=threading.Event)

    @property
    def api(self) -> str:
        return f"http://{self.ip}:{self.port}{self.base_url.rstrip('/')}/api"

    def watch(self) -> None:
        """Off the controllers' thread (which holds the store's lock): until the server
        answers HTTP (``GET <base_url>api``, its one route without a token), then, while it
        runs, whether a kernel is executing (``/api/kernels``, not counted as activity):
        the GPU the notebook holds is busy while it does."""
        while self.process.poll() is None and not self.answering.is_set():
            try:
                # http on the pod's own loopback address, never a user-given URL
                with urllib.request.urlopen(self.api, timeout=1) as response:  # noqa: S310
                    if response.status == 200:
                        self.answering.set()
            except (OSError, urllib.error.URLError):
                time.sleep(0.1)
        request = urllib.request.Request(  # noqa: S310 - the pod's loopback address
            f"{self.api}/kernels?no_track_activity=1",
            headers={"Authorization": f"token {self.token}"},
        )
        while self.process.poll() is None:
            try:
                with urllib.request.urlopen(request, timeout=2) as response:  # noqa: S310
                    kernels = json.load(response)
                busy = any(k.get("execution_state") == "busy" for k in kernels)
                (self.busy.set if busy else self.busy.clear)()
            except (OSError, urllib.error.URLError, ValueError):
                self.busy.clear()
            time.sleep(0.5)


# Started in the child before it becomes jupyter-lab: it gets SIGTERM when the sandbox
# exits, however it exits (``prctl(PR_SET_PDEATHSIG)``; a ``preexec_fn`` would do it too,
# but is not safe in a process with threads, as the sandbox is).
_LAUNCH = f"""
import ctypes, os, signal, sys
if sys.platform.startswith("linux"):
    ctypes.CDLL("libc.so.6", use_errno=True).prctl({PR_SET_PDEATHSIG}, signal.SIGTERM)
    if os.getppid() == 1:
        sys.exit(1)
os.execv(sys.argv[1], sys.argv[1:])
"""


class Servers:
    """The running servers, by pod uid."""

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self._servers: dict[str, Server] = {}
        self._lock = threading.Lock()

    def start(self, pod: Obj, env: dict[str, str], home_claim: str | None) -> Server:
        """Start the pod's server (a second start of a running one returns it)."""
        uid = pod["metadata"]["uid"]
        with self._lock:
            found = self._servers.get(uid)
            if found is not None and found.process.poll() is None:
                return found
        container = pod["spec"]["containers"][0]
        ip, port = pod_ip(uid), container_port(pod)
        root = self.home_dir(pod["metadata"]["namespace"], home_claim, uid)
        private = self.workdir / "jupyter" / uid
        for sub in ("config", "data", "runtime", "ipython"):
            (private / sub).mkdir(parents=True, exist_ok=True)
        options = [str(a) for a in container.get("args") or [] if str(a).startswith(PASSED_OPTIONS)]
        base_url = next(
            (o.split("=", 1)[1] for o in options if o.startswith("--ServerApp.base_url=")), "/"
        )
        command = [
            sys.executable,
            "-c",
            _LAUNCH,
            str(Path(sys.executable).parent / "jupyter-lab"),
            "--no-browser",
            f"--ServerApp.ip={ip}",
            f"--ServerApp.port={port}",
            "--ServerApp.port_retries=0",
            f"--ServerApp.root_dir={root}",
            *options,
        ]
        if os.geteuid() == 0:
            command.append("--allow-root")
        log = private / "container.log"
        process_env = {
            "PATH": os.environ.get("PATH", ""),
            "HOME": str(root),
            "JUPYTER_CONFIG_DIR": str(private / "config"),
            "JUPYTER_DATA_DIR": str(private / "data"),
            "JUPYTER_RUNTIME_DIR": str(private / "runtime"),
            "IPYTHONDIR": str(private / "ipython"),
            **env,
        }
        with log.open("ab") as out:
            # Our own interpreter's jupyter-lab, never a user-given program.
            process = subprocess.Popen(
                command,
                env=process_env,
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                cwd=root,
            )
        server = Server(uid, process, ip, port, base_url, log, env.get("JUPYTER_TOKEN", ""))
        threading.Thread(target=server.watch, name=f"jupyter-{uid[:8]}", daemon=True).start()
        with self._lock:
            self._servers[uid] = server
        return server

    def home_dir(self, namespace: str, claim: str | None, uid: str) -> Path:
        """A claim's files (kept while the claim is), else the pod's own (gone with it)."""
        path = (
            self.workdir / "volumes" / namespace / claim
            if claim
            else self.workdir / "jupyter" / uid / "home"
        )
        path.mkdir(parents=True, exist_ok=True)
        return path

    def claim_deleted(self, namespace: str, claim: str) -> None:
        """A deleted claim's volume goes with it (the default reclaim policy, Delete)."""
        shutil.rmtree(self.workdir / "volumes" / namespace / claim, ignore_errors=True)

    def get(self, uid: str) -> Server | None:
        with self._lock:
            return self._servers.get(uid)

    def exit_code(self, uid: str) -> int | None:
        """The server's exit code once it has stopped; None while it runs (or unknown)."""
        server = self.get(uid)
        return None if server is None else server.process.poll()

    def ready(self, uid: str) -> bool:
        """The server runs and has answered HTTP."""
        server = self.get(uid)
        return server is not None and server.process.poll() is None and server.answering.is_set()

    def busy(self, uid: str) -> bool:
        """A kernel of the pod's server is executing now."""
        server = self.get(uid)
        return server is not None and server.busy.is_set()

    def stop(self, uid: str, *, remove: bool = True) -> None:
        """SIGTERM (the server stops its kernels), SIGKILL after 5 s; its private files go
        with the pod (``remove``), its home claim's stay."""
        with self._lock:
            server = self._servers.pop(uid, None)
        if server is not None and server.process.poll() is None:
            server.process.terminate()
            try:
                server.process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                server.process.kill()
                server.process.wait(timeout=5)
        if remove:
            shutil.rmtree(self.workdir / "jupyter" / uid, ignore_errors=True)

    def __bool__(self) -> bool:
        """Whether any server runs (most clusters run none: nothing to look after)."""
        with self._lock:
            return bool(self._servers)

    def stop_gone(self, live: set[str]) -> None:
        """Stop the servers of pods no longer in the cluster (deleted without a grace
        period, or taken by their namespace)."""
        with self._lock:
            gone = [uid for uid in self._servers if uid not in live]
        for uid in gone:
            self.stop(uid)

    def stop_all(self) -> None:
        with self._lock:
            uids = list(self._servers)
        for uid in uids:
            self.stop(uid, remove=False)

    def log_text(self, uid: str) -> str | None:
        path = self.workdir / "jupyter" / uid / "container.log"
        return path.read_text(errors="replace") if path.exists() else None


def container_env(store_get: Any, pod: Obj) -> dict[str, str]:
    """The container's env with values and Secret keys resolved (``store_get(key, ns,
    name)`` reads an object)."""
    env: dict[str, str] = {}
    ns = pod["metadata"]["namespace"]
    for item in pod["spec"]["containers"][0].get("env") or []:
        if "value" in item:
            env[item["name"]] = str(item["value"])
            continue
        ref = (item.get("valueFrom") or {}).get("secretKeyRef") or {}
        secret = store_get("secrets", ns, ref.get("name", "")) if ref else None
        data = (secret or {}).get("data") or {}
        if ref.get("key") in data:
            env[item["name"]] = base64.b64decode(data[ref["key"]]).decode()
    return env


def home_claim(pod: Obj, env: dict[str, str]) -> str | None:
    """The PersistentVolumeClaim mounted at the container's home, if any."""
    home = env.get("HOME", DEFAULT_HOME)
    container = pod["spec"]["containers"][0]
    mount = next(
        (m for m in container.get("volumeMounts") or [] if m.get("mountPath") == home), None
    )
    if mount is None:
        return None
    volume = next(
        (v for v in pod["spec"].get("volumes") or [] if v.get("name") == mount.get("name")), None
    )
    claim = ((volume or {}).get("persistentVolumeClaim") or {}).get("claimName")
    return str(claim) if claim else None
