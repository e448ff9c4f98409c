"""Start the local cluster (``python -m sandbox``: the real control plane, simulated GPU
nodes) as a real subprocess for tests and benchmarks.

    proc = start_sandbox(tmp_path, profile="small", speed=30)
    kubernetes.config.load_kube_config(config_file=str(proc.kubeconfig))
    ...
    proc.stop()

Each process gets free ports, its own state folder and kubeconfig under ``tmp_path``.
"""

from __future__ import annotations

import json
import os
import ssl
import subprocess
import sys
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.processes import http_ok, spawn, terminate, wait_ready

REPO_ROOT = Path(__file__).resolve().parents[1]
READY_TIMEOUT = 180.0


@dataclass
class SandboxProcess:
    workdir: Path
    profile: str
    speed: float
    extra_args: tuple[str, ...] = ()
    token: str = "test-token"
    api_port: int = 0
    metrics_port: int = 0
    api_url: str = ""  # https://127.0.0.1:<port>
    ca_file: Path | None = None
    process: subprocess.Popen[bytes] | None = field(default=None, repr=False)

    @property
    def kubeconfig(self) -> Path:
        return self.workdir / "kubeconfig"

    @property
    def state(self) -> Path:
        return self.workdir / "state"

    @property
    def ports_file(self) -> Path:
        return self.workdir / "ports.json"

    @property
    def log_file(self) -> Path:
        return self.workdir / "sandbox.log"

    def ssl_context(self) -> ssl.SSLContext | None:
        """A client context that trusts this sandbox's CA (None over plain HTTP)."""
        if self.ca_file is None:
            return None
        return ssl.create_default_context(cafile=str(self.ca_file))

    @property
    def metrics_url(self) -> str:
        return f"http://127.0.0.1:{self.metrics_port}/metrics"

    def start(self, reset: bool = True) -> SandboxProcess:
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.ports_file.unlink(missing_ok=True)
        cmd = [
            sys.executable,
            "-m",
            "sandbox",
            "--profile",
            self.profile,
            "--port",
            str(self.api_port),
            "--metrics-port",
            str(self.metrics_port),
            "--state",
            str(self.state),
            "--kubeconfig",
            str(self.kubeconfig),
            "--ports-file",
            str(self.ports_file),
            "--speed",
            str(self.speed),
            "--token",
            self.token,
            *self.extra_args,
        ]
        if reset:
            cmd.append("--reset")
        pythonpath = os.pathsep.join(p for p in (str(REPO_ROOT), os.environ.get("PYTHONPATH")) if p)
        self.process = spawn(cmd, self.log_file, env={"PYTHONPATH": pythonpath}, cwd=REPO_ROOT)
        # The real control plane starts in ~20 s on an idle machine (its binaries are built
        # before the suite runs: scripts/test.sh); a loaded one needs more.
        wait_ready(
            self.process, self._ready, what="sandbox", log_file=self.log_file, timeout=READY_TIMEOUT
        )
        return self

    def _ready(self) -> bool:
        if not self.ports_file.exists():
            return False
        info = json.loads(self.ports_file.read_text())
        self.api_port, self.metrics_port = info["api_port"], info["metrics_port"]
        self.api_url = info["api_url"]
        self.ca_file = Path(info["ca_file"]) if info.get("ca_file") else None
        return http_ok(f"{self.api_url}/readyz", context=self.ssl_context())

    def stop(self, timeout: float = 30.0) -> int | None:
        """SIGTERM and wait: the clean shutdown path."""
        return terminate(self.process, timeout)

    def kill(self) -> None:
        """SIGKILL: what a crash looks like; state must survive it too."""
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait()

    def restart(self, hard: bool = False) -> SandboxProcess:
        """Stop (or kill) and start again on the same ports and state file."""
        if hard:
            self.kill()
        else:
            self.stop(timeout=30)
        return self.start(reset=False)


def inject(sandbox: SandboxProcess, **body: Any) -> dict[str, Any]:
    """``POST /sandbox/faults`` on the simulated nodes' metrics port: make a GPU or node fail
    (``sandbox/faults.py``)."""
    request = urllib.request.Request(
        f"http://127.0.0.1:{sandbox.metrics_port}/sandbox/faults",
        data=json.dumps(body).encode(),
        headers={"Authorization": f"Bearer {sandbox.token}"},
        method="POST",
    )
    with urllib.request.urlopen(request, timeout=10) as resp:
        return dict(json.load(resp))


def start_sandbox(
    tmp_path: Path,
    profile: str = "small",
    speed: float = 30.0,
    extra_args: Sequence[str] = (),
    token: str = "test-token",
) -> SandboxProcess:
    return SandboxProcess(
        Path(tmp_path) / "sandbox", profile, speed, tuple(extra_args), token
    ).start()
