"""The one Redis client the portal's services share (locks, marks), per ``REDIS_URL``."""

from __future__ import annotations

import functools

import redis
from django.conf import settings


def redis_client() -> redis.Redis:
    """A client for ``REDIS_URL`` with bounded timeouts; its connection pool is reused."""
    return _client_for(settings.REDIS_URL)


@functools.lru_cache(maxsize=4)
def _client_for(url: str) -> redis.Redis:
    # Building a client (and its pool) per call cost more than the call itself.
    return redis.Redis.from_url(url, socket_timeout=5, socket_connect_timeout=5)
