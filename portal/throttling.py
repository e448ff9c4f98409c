"""Per-user throttling of API writes (reads are cheap and scoped already).

DRF's own ``UserRateThrottle``: a sliding log of each user's recent writes kept in the
default cache, which is Redis in every deployment, so all gunicorn workers share it.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from rest_framework.request import Request
from rest_framework.throttling import UserRateThrottle

SAFE_METHODS = ("GET", "HEAD", "OPTIONS")


class WriteRateThrottle(UserRateThrottle):
    """``API_WRITE_RATE`` writes per user in any sliding window."""

    scope = "writes"

    def get_rate(self) -> str:
        # Read at request time so the operator's setting (and tests) take effect.
        return str(settings.API_WRITE_RATE)

    def allow_request(self, request: Request, view: Any) -> bool:
        if request.method in SAFE_METHODS:
            return True
        return super().allow_request(request, view)
