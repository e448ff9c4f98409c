"""Per-user throttling of API writes (reads are cheap and scoped already)."""

from __future__ import annotations

import functools
import secrets
from typing import Any

from django.conf import settings
from django.core.cache import caches
from django.core.cache.backends.redis import RedisCache
from redis import ConnectionPool, Redis
from redis.commands.core import Script
from rest_framework.request import Request
from rest_framework.throttling import UserRateThrottle

SAFE_METHODS = ("GET", "HEAD", "OPTIONS")

# DRF's sliding log (drop the requests older than the window; refuse when as many as the
# limit remain, else log this one) done in Redis in one round trip instead of a GET and a
# SET of the whole pickled history, and atomically, so two requests at once cannot both
# take the last slot. ARGV: now, window (s), limit, a unique member for this request.
# Returns {allowed, requests in the window, oldest request's time (when refused)}.
_SLIDING_LOG = """
local now, window, limit = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now - window)
local count = redis.call('ZCARD', KEYS[1])
if count >= limit then
  local oldest = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
  return {0, count, oldest[2] or ARGV[1]}
end
redis.call('ZADD', KEYS[1], now, ARGV[4])
redis.call('EXPIRE', KEYS[1], window)
return {1, count + 1, ARGV[1]}
"""


@functools.lru_cache(maxsize=64)
def _sliding_log_for(pool: ConnectionPool) -> Script:
    # One client per connection pool: building a redis.Redis costs more than the call.
    return Redis(connection_pool=pool).register_script(_SLIDING_LOG)


def _sliding_log(backend: object) -> Script | None:
    """The script on the cache's Redis, or None when the cache is not Redis."""
    if not isinstance(backend, RedisCache):
        return None
    client = backend._cache  # type: ignore[attr-defined]
    return _sliding_log_for(client._get_connection_pool(write=True))


class WriteRateThrottle(UserRateThrottle):
    """``API_WRITE_RATE`` writes per user in any sliding window (DRF's semantics)."""

    scope = "writes"
    # A Redis sorted set, not DRF's pickled list: a key name of its own.
    cache_format = "throttle_%(scope)s_%(ident)s_log"
    num_requests: int  # set from the rate by SimpleRateThrottle.__init__
    duration: int

    def get_rate(self) -> str:
        # Read at request time so the operator's setting (and tests) take effect.
        return str(settings.API_WRITE_RATE)

    def allow_request(self, request: Request, view: Any) -> bool:
        if request.method in SAFE_METHODS:
            return True
        backend = caches["default"]
        script = _sliding_log(backend)
        if script is None:
            return super().allow_request(request, view)
        if self.rate is None:
            return True
        self.key = self.get_cache_key(request, view)
        if self.key is None:
            return True
        self.now = self.timer()
        allowed, count, oldest = script(
            keys=[backend.make_and_validate_key(self.key)],
            args=[repr(self.now), self.duration, self.num_requests, secrets.token_hex(8)],
        )
        self._count, self._oldest = int(count), float(oldest)
        return bool(allowed)

    def wait(self) -> float | None:
        """Seconds until a request would be allowed (``Retry-After``), as DRF counts it."""
        if not hasattr(self, "_oldest"):
            return super().wait()
        remaining = self.duration - (self.now - self._oldest)
        available = self.num_requests - self._count + 1
        if available <= 0:
            return None
        return remaining / float(available)
