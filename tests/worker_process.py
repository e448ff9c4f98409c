"""Start a real Celery worker (with embedded beat) as a subprocess for integration tests."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.processes import spawn, tail, wait_ready

REPO_ROOT = Path(__file__).resolve().parents[1]


@dataclass
class WorkerProcess:
    workdir: Path
    env: dict[str, str]
    process: subprocess.Popen[bytes] | None = field(default=None, repr=False)

    @property
    def log_file(self) -> Path:
        return self.workdir / "worker.log"

    def start(self, timeout: float = 90.0) -> WorkerProcess:
        self.workdir.mkdir(parents=True, exist_ok=True)
        start_at = self.log_file.stat().st_size if self.log_file.exists() else 0
        cmd = [
            sys.executable, "-m", "celery", "-A", "portal", "worker", "--beat",
            "--schedule", str(self.workdir / "beat-schedule"),
            "--pool", "prefork", "--concurrency", "2", "--loglevel", "INFO",
            "--without-gossip", "--without-mingle", "--without-heartbeat",
        ]  # fmt: skip
        self.process = spawn(cmd, self.log_file, env=self.env, cwd=REPO_ROOT)

        def ready() -> bool:
            return " ready." in self.log_file.read_bytes()[start_at:].decode(errors="replace")

        wait_ready(self.process, ready, what="worker", log_file=self.log_file, timeout=timeout)
        return self

    def tail(self, size: int = 4000) -> str:
        return tail(self.log_file, size)

    def stop(self, timeout: float = 15.0) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.kill()

    def kill(self) -> None:
        """SIGKILL the main process and its pool children: a crashed worker."""
        if self.process is None or self.process.poll() is not None:
            return
        try:
            children = subprocess.run(
                ["pgrep", "-P", str(self.process.pid)], capture_output=True, text=True, check=False
            ).stdout.split()
        except OSError:
            children = []
        for pid in children:
            with contextlib.suppress(ProcessLookupError, ValueError):
                os.kill(int(pid), signal.SIGKILL)
        self.process.kill()
        self.process.wait()


def wait_for(predicate: Callable[[], Any], timeout: float = 30.0, interval: float = 0.2) -> Any:
    """Poll until ``predicate()`` is truthy; return its value or fail with the last one."""
    deadline = time.monotonic() + timeout
    value = None
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"condition not met within {timeout}s (last value: {value!r})")
