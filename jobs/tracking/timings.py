"""The worker's own measurements, kept in Redis so every process reports the same numbers.

``monitoring.metrics`` exposes them at ``/metrics`` as
``gpu_portal_reconcile_duration_seconds``.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from contextlib import contextmanager

import redis

from core.redis_client import redis_client

logger = logging.getLogger(__name__)

RECONCILE_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
RECONCILE_KEY = "gpu-portal:metrics:reconcile"  # Redis hash: bucket counts, count, sum, last


def reconcile_redis() -> redis.Redis:
    """The shared Redis client, with a one-second timeout: metrics must not hold up work."""
    return redis_client(timeout=1.0)


def reconcile_observe(seconds: float) -> None:
    """Record one reconcile run's duration (never raises: metrics must not break work)."""
    try:
        pipe = reconcile_redis().pipeline()
        for bound in RECONCILE_BUCKETS:
            if seconds <= bound:
                pipe.hincrby(RECONCILE_KEY, f"le:{bound:g}", 1)
        pipe.hincrby(RECONCILE_KEY, "count", 1)
        pipe.hincrbyfloat(RECONCILE_KEY, "sum", seconds)
        pipe.hset(RECONCILE_KEY, "last", f"{seconds:.6f}")
        pipe.execute()
    except redis.RedisError as exc:
        logger.warning("reconcile duration not recorded: %s", exc)


@contextmanager
def reconcile_timer() -> Iterator[None]:
    """``with reconcile_timer(): cluster_reconcile()`` — times the block, even when it fails."""
    started = time.monotonic()
    try:
        yield
    finally:
        reconcile_observe(time.monotonic() - started)
