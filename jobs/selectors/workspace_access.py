"""Where a workspace answers and the secret its server requires: the path the portal's
proxy serves it under and its token, derived from the job's row (read by the apply
pipeline, the proxy and the activity reader alike)."""

from __future__ import annotations

from django.utils.crypto import salted_hmac

from jobs.models import Job

WORKSPACE_PATH = "/workspaces/{id}/"
_TOKEN_SALT = "gpu-portal.workspace-token"  # noqa: S105 - an HMAC salt, not a secret


def workspace_token(job: Job) -> str:
    """The secret the workspace's server requires and only the portal's proxy presents:
    derived from the portal's SECRET_KEY, the job's id and its creation time (so a reused
    id after a database reset never gets an old token). Rotating SECRET_KEY changes it:
    a running workspace must then be stopped and started (docs/workspaces.md)."""
    return salted_hmac(
        _TOKEN_SALT, f"{job.pk}:{job.created_at.isoformat()}", algorithm="sha256"
    ).hexdigest()
