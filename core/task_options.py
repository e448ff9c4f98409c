"""Celery options every app's tasks share.

Kopf's split (``docs/errors.rst`` of Kopf): a temporary error (the cluster's 5xx, 429, a
timeout, a refused connection) is retried with exponential backoff and jitter, a bounded
number of times; every other error is permanent and never retried (the periodic reconcile
and sync pick the work up again, or an admin fixes what the error names).
"""

from __future__ import annotations

from typing import Any

# Acknowledged late and rejected (so redelivered) when the worker dies mid-task.
ROBUST: dict[str, Any] = {"acks_late": True, "reject_on_worker_lost": True}


def retry_temporary(*errors: type[Exception]) -> dict[str, Any]:
    """Options that retry ``errors`` (and nothing else): 2, 4, 8 … 60 s apart with jitter,
    at most 8 times."""
    return {
        "autoretry_for": errors,
        "retry_backoff": 2,
        "retry_backoff_max": 60,
        "retry_jitter": True,
        "max_retries": 8,
    }
