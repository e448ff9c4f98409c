"""Start the sandbox as a real subprocess for tests (the portal's tests use it too).

    proc = start_sandbox(tmp_path, profile="small", speed=30)
    kubernetes.config.load_kube_config(config_file=str(proc.kubeconfig))
    ...
    proc.stop()

Each process gets free ports, its own SQLite state file and kubeconfig under ``tmp_path``.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
READY_TIMEOUT = 30.0


@dataclass
class SandboxProcess:
    workdir: Path
    profile: str
    speed: float
    extra_args: tuple[str, ...] = ()
    token: str = "test-token"
    api_port: int = 0
    metrics_port: int = 0
    process: subprocess.Popen[bytes] | None = field(default=None, repr=False)

    @property
    def kubeconfig(self) -> Path:
        return self.workdir / "kubeconfig"

    @property
    def state(self) -> Path:
        return self.workdir / "state.sqlite3"

    @property
    def ports_file(self) -> Path:
        return self.workdir / "ports.json"

    @property
    def log_file(self) -> Path:
        return self.workdir / "sandbox.log"

    @property
    def api_url(self) -> str:
        return f"http://127.0.0.1:{self.api_port}"

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
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO_ROOT), env.get("PYTHONPATH")) if p)
        log = open(self.log_file, "ab")  # noqa: SIM115 - owned by the child's lifetime
        self.process = subprocess.Popen(
            cmd, cwd=REPO_ROOT, env=env, stdout=log, stderr=subprocess.STDOUT
        )
        log.close()
        self._wait_ready()
        return self

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + READY_TIMEOUT
        while time.monotonic() < deadline:
            if self.process is not None and self.process.poll() is not None:
                raise RuntimeError(f"sandbox exited early:\n{self.log_file.read_text()[-3000:]}")
            if self.ports_file.exists():
                info = json.loads(self.ports_file.read_text())
                self.api_port, self.metrics_port = info["api_port"], info["metrics_port"]
                try:
                    with urllib.request.urlopen(f"{self.api_url}/readyz", timeout=2) as resp:
                        if resp.status == 200:
                            return
                except OSError:
                    pass
            time.sleep(0.05)
        self.kill()
        raise TimeoutError(f"sandbox not ready:\n{self.log_file.read_text()[-3000:]}")

    def stop(self, timeout: float = 10.0) -> int | None:
        """SIGTERM and wait: the clean shutdown path."""
        if self.process is None or self.process.poll() is not None:
            return None if self.process is None else self.process.returncode
        self.process.send_signal(signal.SIGTERM)
        try:
            return self.process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            return self.process.wait()

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
            self.stop()
        return self.start(reset=False)


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
