"""gunicorn's settings for the portal's web process.

gunicorn reads this file from its working directory: the Dockerfile's command, docker
compose and the submit benchmark (``bench/bench_submit.py``) all serve the portal with
it. A flag on the command line or in ``GUNICORN_CMD_ARGS`` overrides any setting here.

Sync workers: each worker serves one request at a time and closes the connection after
it, so every request is accepted afresh by whichever worker is free. Workers that keep
connections alive (gthread) keep each client on the worker that accepted it; with the
submit benchmark's 8 clients on 2 cores, clients sharing a worker waited 107 ms for an
answer while the one alone on its worker waited 16 ms (median per client, 2 workers).
In front of the portal, the ingress (or any reverse proxy) buffers slow clients, as
gunicorn advises for sync workers.
"""

from __future__ import annotations

import math
import os
from pathlib import Path


def cpus_available(cgroup: Path = Path("/sys/fs/cgroup/cpu.max")) -> int:
    """CPUs this process may use: its container's CPU limit (cgroup v2 ``cpu.max``) when
    one is set, else the CPUs it may run on. A container sees every core of its host;
    sizing workers by them would open more database connections than the limit can use."""
    cpus = len(os.sched_getaffinity(0))
    try:
        quota, period = cgroup.read_text().split()
    except (OSError, ValueError):
        return cpus
    if quota == "max":
        return cpus
    return max(1, min(cpus, math.ceil(int(quota) / int(period))))


bind = "0.0.0.0:8000"
# WEB_CONCURRENCY is the conventional knob (gunicorn's own default reads it, so it must be
# a number when set); unset or 0: 2 × the CPUs available + 1, gunicorn's rule of thumb.
# Each worker holds one PostgreSQL connection (CONN_MAX_AGE), so workers × replicas must
# stay under the database's max_connections, with room for the Celery workers.
workers = int(os.environ.get("WEB_CONCURRENCY") or 0) or 2 * cpus_available() + 1
worker_class = "sync"
timeout = 60
accesslog = "-"
