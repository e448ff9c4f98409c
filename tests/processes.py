"""Running real helper processes (sandbox, Celery worker, Prometheus) for tests."""

from __future__ import annotations

import os
import signal
import ssl
import subprocess
import time
import urllib.request
from collections.abc import Callable, Sequence
from pathlib import Path

from sandbox.children import with_parent


def spawn(
    cmd: Sequence[str],
    log_file: Path,
    *,
    env: dict[str, str] | None = None,
    cwd: Path | None = None,
) -> subprocess.Popen[bytes]:
    """Start ``cmd`` with stdout and stderr appended to ``log_file``. It gets SIGTERM when
    the test process dies, however (``sandbox/children.py``): a test run killed halfway
    leaves no cluster, worker or server behind to serve the next run's broker or ports."""
    log_file.parent.mkdir(parents=True, exist_ok=True)
    with open(log_file, "ab") as log:  # the child keeps its own copy of the descriptor
        return subprocess.Popen(
            with_parent(list(cmd)),
            cwd=cwd,
            env={**os.environ, **(env or {})},
            stdout=log,
            stderr=subprocess.STDOUT,
        )


def tail(log_file: Path, size: int = 4000) -> str:
    return log_file.read_text(errors="replace")[-size:] if log_file.exists() else ""


def wait_ready(
    process: subprocess.Popen[bytes],
    ready: Callable[[], bool],
    *,
    what: str,
    log_file: Path,
    timeout: float = 60.0,
) -> None:
    """Poll ``ready()`` until it is true; fail with the log when the process dies or stalls
    (a minute: a server of several workers takes half of it to boot on a machine as loaded
    as the whole suite's six processes make it)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"{what} exited early:\n{tail(log_file)}")
        if ready():
            return
        time.sleep(0.05)
    process.kill()
    process.wait()
    raise TimeoutError(f"{what} not ready after {timeout:.0f}s:\n{tail(log_file)}")


def http_ok(url: str, context: ssl.SSLContext | None = None) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2, context=context) as response:
            return bool(response.status == 200)
    except OSError:
        return False


def terminate(process: subprocess.Popen[bytes] | None, timeout: float = 10.0) -> int | None:
    """SIGTERM and wait (the clean shutdown path); SIGKILL if it does not stop in time."""
    if process is None:
        return None
    if process.poll() is not None:
        return process.returncode
    process.send_signal(signal.SIGTERM)
    try:
        return process.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        return process.wait()
