"""Real servers for the pods of workspace images: the kubelet runs them as local processes
instead of simulating the container.

- **JupyterLab** for the Jupyter Docker Stacks' images (``quay.io/jupyter/<name>-notebook``):
  ``jupyter-lab`` of the sandbox's own environment. It takes the container's token
  (``JUPYTER_TOKEN``) and its ``--ServerApp.*`` / ``--IdentityProvider.*`` / ``--LabApp.*``
  arguments (``base_url``). A kernel executing makes the pod's GPU busy (``sandbox.dcgm``).
- **code-server** for Coder's image (``codercom/code-server``): the release that
  ``scripts/install_code_server.sh`` puts in ``var/code-server`` (``SANDBOX_CODE_SERVER``
  names another), run by Node.js. It takes the container's ``PASSWORD`` and its ``--auth``,
  ``--disable-*`` and ``--abs-proxy-base-path`` arguments; its ``--bind-addr`` is the pod's.

Each such pod gets its own loopback address (``127.x.y.z``, from its uid) as its pod IP, so
many servers listen on the same container port, and the portal reaches it as it would a pod
in a cluster: pod IP and container port. The server serves the directory of the
PersistentVolumeClaim mounted at its home (``HOME``, else the image's), kept under the
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

from sandbox.children import with_parent

Obj = dict[str, Any]
JUPYTER = "jupyter"
CODE_SERVER = "code-server"
IMAGES = {
    JUPYTER: re.compile(r"(^|/)jupyter/[a-z0-9._-]+-notebook(:[\w.-]+)?(@sha256:[0-9a-f]+)?$"),
    CODE_SERVER: re.compile(r"(^|/)codercom/code-server(:[\w.-]+)?(@sha256:[0-9a-f]+)?$"),
}
DEFAULT_PORT = {JUPYTER: 8888, CODE_SERVER: 8080}
DEFAULT_HOME = {JUPYTER: "/home/jovyan", CODE_SERVER: "/home/coder"}
PASSED_OPTIONS = ("--ServerApp.", "--IdentityProvider.", "--LabApp.")
# code-server's options a container may set (``--bind-addr`` is the pod's own).
CODE_SERVER_FLAGS = frozenset({"--disable-telemetry", "--disable-update-check"})
CODE_SERVER_VALUED = frozenset({"--auth", "--abs-proxy-base-path"})
REPO_ROOT = Path(__file__).resolve().parents[1]


def volume_dir(root: Path, namespace: str, claim: str) -> Path:
    """Where a claim's files live under the nodes' work folder (its volume's hostPath)."""
    return root / "volumes" / namespace / claim


def flavor(pod: Obj) -> str | None:
    """Which server the pod's (first) container runs for real; None: it is simulated."""
    containers = (pod.get("spec") or {}).get("containers") or []
    image = str(containers[0].get("image", "")) if containers else ""
    return next((name for name, pattern in IMAGES.items() if pattern.search(image)), None)


def is_real(pod: Obj) -> bool:
    return flavor(pod) is not None


def code_server_root() -> Path:
    return Path(os.environ.get("SANDBOX_CODE_SERVER") or REPO_ROOT / "var" / "code-server")


def pod_ip(uid: str) -> str:
    """The pod's own loopback address: 127.a.b.c from its uid (never 127.0.0.x)."""
    digest = hashlib.sha256(uid.encode()).digest()
    return f"127.{digest[0] % 254 + 1}.{digest[1]}.{digest[2] % 253 + 2}"


def container_port(pod: Obj) -> int:
    container = pod["spec"]["containers"][0]
    ports = container.get("ports") or []
    return int(ports[0]["containerPort"]) if ports else DEFAULT_PORT[flavor(pod) or JUPYTER]


def code_server_options(args: list[Any]) -> list[str]:
    """The container's code-server options the sandbox passes on (as ``--opt=value``)."""
    options, words = [], [str(a) for a in args]
    for i, word in enumerate(words):
        name, has_value, value = word.partition("=")
        if name in CODE_SERVER_FLAGS and not has_value:
            options.append(name)
        elif name in CODE_SERVER_VALUED:
            if not has_value and i + 1 < len(words):
                value = words[i + 1]
            if value:
                options.append(f"{name}={value}")
    return options


@dataclass
class Server:
    uid: str
    flavor: str
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

    @property
    def health(self) -> str:
        """What answers without the secret once the server serves: Jupyter Server's
        ``<base_url>api`` (its version), code-server's ``/healthz``."""
        if self.flavor == CODE_SERVER:
            return f"http://{self.ip}:{self.port}/healthz"
        return self.api

    def watch(self) -> None:
        """Off the controllers' thread (which holds the store's lock): until the server
        answers HTTP, then, for Jupyter while it runs, whether a kernel is executing
        (``/api/kernels``, not counted as activity): the GPU the notebook holds is busy
        while it does."""
        while self.process.poll() is None and not self.answering.is_set():
            try:
                # http on the pod's own loopback address, never a user-given URL
                with urllib.request.urlopen(self.health, timeout=1) as response:  # noqa: S310
                    if response.status == 200:
                        self.answering.set()
            except (OSError, urllib.error.URLError):
                time.sleep(0.1)
        if self.flavor != JUPYTER:
            return
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


def _jupyter(
    args: list[Any], ip: str, port: int, root: Path, private: Path
) -> tuple[list[str], dict[str, str], str]:
    """jupyter-lab of the sandbox's environment: command, environment, base URL."""
    for sub in ("config", "data", "runtime", "ipython"):
        (private / sub).mkdir(parents=True, exist_ok=True)
    options = [str(a) for a in args if str(a).startswith(PASSED_OPTIONS)]
    base_url = next(
        (o.split("=", 1)[1] for o in options if o.startswith("--ServerApp.base_url=")), "/"
    )
    command = [
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
    env = {
        "JUPYTER_CONFIG_DIR": str(private / "config"),
        "JUPYTER_DATA_DIR": str(private / "data"),
        "JUPYTER_RUNTIME_DIR": str(private / "runtime"),
        "IPYTHONDIR": str(private / "ipython"),
    }
    return command, env, base_url


def _code_server(
    args: list[Any], ip: str, port: int, root: Path, private: Path
) -> tuple[list[str], dict[str, str], str]:
    """The installed code-server under Node.js: command, environment, base URL. Missing,
    the container fails with the reason in its log (and restarts, as a real one would)."""
    entry = code_server_root() / "out" / "node" / "entry.js"
    node = shutil.which("node")
    if node is None or not entry.exists():
        missing = (
            f"code-server is not installed in the sandbox ({entry}): "
            "run scripts/install_code_server.sh"
        )
        return [sys.executable, "-c", f"import sys; print({missing!r}); sys.exit(127)"], {}, "/"
    for sub in ("data", "extensions", "config"):
        (private / sub).mkdir(parents=True, exist_ok=True)
    command = [
        node,
        str(entry),
        f"--bind-addr={ip}:{port}",
        f"--user-data-dir={private / 'data'}",
        f"--extensions-dir={private / 'extensions'}",
        *code_server_options(args),
        str(root),
    ]
    return command, {"XDG_CONFIG_HOME": str(private / "config")}, "/"


class Servers:
    """The running servers, by pod uid."""

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir.resolve()  # the servers run in their home folders
        self._servers: dict[str, Server] = {}
        self._lock = threading.Lock()

    def start(self, pod: Obj, env: dict[str, str], home_claim: str | None) -> Server:
        """Start the pod's server (a second start of a running one returns it)."""
        uid = pod["metadata"]["uid"]
        with self._lock:
            found = self._servers.get(uid)
            if found is not None and found.process.poll() is None:
                return found
        kind = flavor(pod) or JUPYTER
        args = pod["spec"]["containers"][0].get("args") or []
        ip, port = pod_ip(uid), container_port(pod)
        root = self.home_dir(pod["metadata"]["namespace"], home_claim, uid)
        private = self.private_dir(uid)
        if kind == CODE_SERVER:
            command, own_env, base_url = _code_server(args, ip, port, root, private)
        else:
            command, own_env, base_url = _jupyter(args, ip, port, root, private)
        log = private / "container.log"
        process_env = {"PATH": os.environ.get("PATH", ""), "HOME": str(root), **own_env, **env}
        with log.open("ab") as out:
            # The sandbox's own jupyter-lab or code-server, never a user-given program.
            process = subprocess.Popen(
                with_parent(command),
                env=process_env,
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                cwd=root,
            )
        token = env.get("JUPYTER_TOKEN" if kind == JUPYTER else "PASSWORD", "")
        server = Server(uid, kind, process, ip, port, base_url, log, token)
        threading.Thread(target=server.watch, name=f"server-{uid[:8]}", daemon=True).start()
        with self._lock:
            self._servers[uid] = server
        return server

    def private_dir(self, uid: str) -> Path:
        """The server's own files (config, runtime, log), gone with its pod."""
        return self.workdir / "servers" / uid

    def home_dir(self, namespace: str, claim: str | None, uid: str) -> Path:
        """A claim's files (kept while the claim is), else the pod's own (gone with it)."""
        path = (
            volume_dir(self.workdir, namespace, claim) if claim else self.private_dir(uid) / "home"
        )
        path.mkdir(parents=True, exist_ok=True)
        return path

    def claim_deleted(self, namespace: str, claim: str) -> None:
        """A deleted claim's volume goes with it (the default reclaim policy, Delete)."""
        shutil.rmtree(volume_dir(self.workdir, namespace, claim), ignore_errors=True)

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
            shutil.rmtree(self.private_dir(uid), ignore_errors=True)

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
        path = self.private_dir(uid) / "container.log"
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
    home = env.get("HOME", DEFAULT_HOME[flavor(pod) or JUPYTER])
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
