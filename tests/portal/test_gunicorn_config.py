"""gunicorn.conf.py: what the image's and compose's bare ``gunicorn portal.wsgi:application``
runs with, read by gunicorn itself from the working directory."""

from __future__ import annotations

import os
import runpy
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
GUNICORN = str(Path(sys.executable).parent / "gunicorn")
CONFIG = runpy.run_path(str(ROOT / "gunicorn.conf.py"))
cpus_available = CONFIG["cpus_available"]


def resolved(**env: str) -> dict[str, str]:
    """gunicorn's own resolution of its settings, started as the Dockerfile starts it."""
    environ = {
        k: v for k, v in os.environ.items() if k not in ("WEB_CONCURRENCY", "GUNICORN_CMD_ARGS")
    }
    out = subprocess.run(
        [GUNICORN, "--print-config", "portal.wsgi:application"],
        cwd=ROOT,
        env={**environ, **env},
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout
    return {
        name.strip(): value.strip()
        for name, _, value in (line.partition("=") for line in out.splitlines())
    }


def test_the_web_process_runs_sync_workers_on_port_8000_with_an_access_log() -> None:
    config = resolved()

    assert config["bind"] == "['0.0.0.0:8000']"
    assert config["worker_class"] == "sync"
    assert config["accesslog"] == "-"
    assert config["timeout"] == "60"
    assert int(config["workers"]) == 2 * cpus_available() + 1


def test_web_concurrency_sets_the_worker_count() -> None:
    assert resolved(WEB_CONCURRENCY="7")["workers"] == "7"
    # docker-compose.yml passes 0 when its .env sets nothing
    assert resolved(WEB_CONCURRENCY="0")["workers"] == str(2 * cpus_available() + 1)


def test_a_command_line_flag_overrides_the_file() -> None:
    assert resolved(GUNICORN_CMD_ARGS="--workers 2 --timeout 30")["timeout"] == "30"


@pytest.mark.parametrize(
    ("cpu_max", "expected"),
    [
        ("200000 100000\n", 2),  # a limit of 2 CPUs
        ("150000 100000\n", 2),  # 1.5 CPUs: a worker for the part-CPU
        ("10000 100000\n", 1),  # a tenth of a CPU still gets one
        ("max 100000\n", None),  # no limit: the CPUs the process may run on
        ("", None),  # unreadable: the same
    ],
)
def test_workers_follow_the_containers_cpu_limit(
    tmp_path: Path, cpu_max: str, expected: int | None
) -> None:
    cgroup = tmp_path / "cpu.max"
    cgroup.write_text(cpu_max)
    on_host = len(os.sched_getaffinity(0))

    assert cpus_available(cgroup) == min(expected or on_host, on_host)


def test_without_a_cgroup_file_the_cpus_it_may_run_on_count(tmp_path: Path) -> None:
    assert cpus_available(tmp_path / "missing") == len(os.sched_getaffinity(0))
