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

REPO_ROOT = Path(__file__).resolve().parents[1]


@dataclass
class WorkerProcess:
    workdir: Path
    env: dict[str, str]
    process: subprocess.Popen[bytes] | None = field(default=None, repr=False)

    @property
    def log_file(self) -> Path:
        return self.workdir / "worker.log"

    def start(self, timeout: float = 30.0) -> WorkerProcess:
        self.workdir.mkdir(parents=True, exist_ok=True)
        start_at = self.log_file.stat().st_size if self.log_file.exists() else 0
        cmd = [
            sys.executable, "-m", "celery", "-A", "portal", "worker", "--beat",
            "--schedule", str(self.workdir / "beat-schedule"),
            "--pool", "prefork", "--concurrency", "2", "--loglevel", "INFO",
            "--without-gossip", "--without-mingle", "--without-heartbeat",
        ]  # fmt: skip
        log = open(self.log_file, "ab")  # noqa: SIM115 - owned by the child's lifetime
        self.process = subprocess.Popen(
            cmd, cwd=REPO_ROOT, env={**os.environ, **self.env}, stdout=log, stderr=subprocess.STDOUT
        )
        log.close()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"worker exited early:\n{self.tail()}")
            text = self.log_file.read_bytes()[start_at:].decode(errors="replace")
            if " ready." in text:
                return self
            time.sleep(0.1)
        self.kill()
        raise TimeoutError(f"worker not ready:\n{self.tail()}")

    def tail(self, size: int = 4000) -> str:
        return self.log_file.read_text(errors="replace")[-size:] if self.log_file.exists() else ""

    def stop(self, timeout: float = 15.0) -> None:
        if self.process is None or self.process.poll() is not None:
            return
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
