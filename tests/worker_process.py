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

import redis

from tests.processes import spawn, wait_ready

REPO_ROOT = Path(__file__).resolve().parents[1]


@dataclass(eq=False)
class WorkerProcess:
    workdir: Path
    env: dict[str, str]
    process: subprocess.Popen[bytes] | None = field(default=None, repr=False)
    log_mark: int = 0  # tail() reads the log from here on (``mark()``)

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

    def mark(self) -> None:
        """From now on ``tail()`` shows only what the worker logs after this: a worker that
        serves several tests shows each test its own lines."""
        self.log_mark = self.log_file.stat().st_size if self.log_file.exists() else 0

    def tail(self, size: int = 4000) -> str:
        if not self.log_file.exists():
            return ""
        with self.log_file.open("rb") as log:
            log.seek(max(self.log_mark, self.log_file.stat().st_size - size))
            return log.read().decode(errors="replace")

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def stop(self, timeout: float = 15.0) -> None:
        """SIGTERM (warm shutdown) and wait for the pool and beat to be gone too: their
        database sessions end with them, before the test database is dropped."""
        if self.process is None or self.process.poll() is not None:
            return
        children = self._children()
        self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            return
        deadline = time.monotonic() + 5
        while any(_running(pid) for pid in children) and time.monotonic() < deadline:
            time.sleep(0.05)
        for pid in children:
            if _running(pid):  # (one that has exited: its pid may be another's by now)
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)

    def kill(self) -> None:
        """SIGKILL the main process and its pool children: a crashed worker."""
        if self.process is None or self.process.poll() is not None:
            return
        for pid in self._children():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        self.process.kill()
        self.process.wait()

    def _children(self) -> list[int]:
        assert self.process is not None
        try:
            found = subprocess.run(
                ["pgrep", "-P", str(self.process.pid)], capture_output=True, text=True, check=False
            ).stdout.split()
        except OSError:
            return []
        return [int(pid) for pid in found if pid.isdigit()]


def _running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


# Workers that serve several tests (``tests/integration/conftest.py::module_worker``).
SHARED: set[WorkerProcess] = set()


def shared_workers_stop() -> None:
    """Stop the shared workers: a test that did not ask for one must not have one working
    on its rows (a test that starts its own workers must have the broker to itself)."""
    for proc in list(SHARED):
        proc.stop()


def redis_reset(url: str) -> None:
    """Empty a Redis database (queued tasks, cache, locks) but for the broker's exchange
    bindings (``_kombu.binding.*``): a worker that stays up across tests, and this process's
    Celery producer, which declared its queue once, keep routing tasks. ``FLUSHDB`` would
    drop them, and every later publish would fail with kombu's "Cannot route message"."""
    client = redis.Redis.from_url(url)
    doomed = [k for k in client.scan_iter(count=1000) if not k.startswith(b"_kombu.binding.")]
    for start in range(0, len(doomed), 500):
        client.delete(*doomed[start : start + 500])


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


def wait_job(job: Any, *states: str, timeout: float = 30.0) -> Any:
    """The job (a ``Job`` or its id) once it is in one of ``states``; on timeout, fail with
    where it is instead: its state, reason, message and last events."""
    from jobs.models import Job

    job_id = getattr(job, "pk", job)
    try:
        return wait_for(
            lambda: (found := Job.objects.get(pk=job_id)).state in states and found,
            timeout=timeout,
        )
    except AssertionError:
        found = Job.objects.get(pk=job_id)
        events = "; ".join(
            f"{e.reason}: {e.message}" for e in found.events.order_by("-pk")[:5][::-1]
        )
        raise AssertionError(
            f"job {found.name} not {'/'.join(states)} within {timeout}s: it is {found.state} "
            f"({found.reason}: {found.message}); last events: {events or '(none)'}"
        ) from None
