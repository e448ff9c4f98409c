"""The one Redis client the portal's services share (locks, marks), per ``REDIS_URL``."""

from __future__ import annotations

import functools

import redis
from django.conf import settings


def redis_client(*, timeout: float = 5.0) -> redis.Redis:
    """A client for ``REDIS_URL`` with bounded timeouts; its connection pool is reused.
    ``timeout`` shorter for work that must never wait long (metrics)."""
    return _client_for(settings.REDIS_URL, timeout)


@functools.lru_cache(maxsize=4)
def _client_for(url: str, timeout: float) -> redis.Redis:
    # Building a client (and its pool) per call cost more than the call itself.
    return redis.Redis.from_url(url, socket_timeout=timeout, socket_connect_timeout=timeout)
