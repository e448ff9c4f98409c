"""`make run` says exactly what is missing when PostgreSQL or Redis do not answer."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "preflight.py"


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])  # closed again when the socket is


def run(**env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(SCRIPT), "--db", "--redis", "--sqlite-fallback", "var/demo.sqlite3"],
        env={"PATH": "/usr/bin:/bin", **env},
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )


def test_without_postgres_the_demo_falls_back_to_sqlite_and_says_how_to_start_it() -> None:
    result = run(
        DATABASE_URL=f"postgres://postgres@127.0.0.1:{closed_port()}/gpu_portal",
        REDIS_URL="redis://127.0.0.1:6379/0",
    )

    assert result.returncode == 0
    assert "PostgreSQL is not reachable" in result.stderr
    assert "pg_ctlcluster" in result.stderr
    assert result.stdout.startswith("export DATABASE_URL=sqlite:///")


def test_without_redis_it_stops_and_prints_the_command_that_starts_it() -> None:
    result = run(
        DATABASE_URL="postgres://postgres@127.0.0.1:5432/gpu_portal",
        REDIS_URL=f"redis://127.0.0.1:{closed_port()}/0",
    )

    assert result.returncode == 1
    assert "Redis is not reachable" in result.stderr
    assert "redis-server --daemonize yes" in result.stderr
