"""Start the real workspace proxy (uvicorn running ``workspaces.proxy.asgi``) for the tests."""

from __future__ import annotations

import socket
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

from tests.processes import spawn, tail, terminate, wait_ready

REPO_ROOT = Path(__file__).resolve().parents[1]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _listening(port: int) -> bool:
    with socket.socket() as sock:
        sock.settimeout(0.5)
        return sock.connect_ex(("127.0.0.1", port)) == 0


@dataclass
class ProxyProcess:
    """The proxy in front of ``upstream`` (the live portal), with the worker's environment
    (database, cluster, SECRET_KEY): what ``make run`` starts on port 8000."""

    workdir: Path
    env: dict[str, str]
    upstream: str
    port: int = field(default_factory=free_port)
    process: subprocess.Popen[bytes] | None = field(default=None, repr=False)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def log_file(self) -> Path:
        return self.workdir / "proxy.log"

    def start(self) -> ProxyProcess:
        cmd = [
            sys.executable, "-m", "uvicorn", "workspaces.proxy.asgi:application",
            "--host", "127.0.0.1", "--port", str(self.port), "--ws", "wsproto", "--no-access-log",
            "--lifespan", "on",
        ]  # fmt: skip
        env = {**self.env, "WORKSPACE_PROXY_UPSTREAM": self.upstream}
        self.process = spawn(cmd, self.log_file, env=env, cwd=REPO_ROOT)
        wait_ready(
            self.process,
            lambda: _listening(self.port),
            what="workspace proxy",
            log_file=self.log_file,
            timeout=60,
        )
        return self

    def tail(self, size: int = 4000) -> str:
        return tail(self.log_file, size)

    def stop(self) -> None:
        terminate(self.process)
