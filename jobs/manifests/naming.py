"""Deterministic object names and the labels every generated object carries."""

from __future__ import annotations

import hashlib
import re

from cluster.labels import (
    COMPONENT_LABEL,
    JOB_ID_LABEL,
    MANAGED_BY_LABEL,
    MANAGED_BY_VALUE,
    NAME_LABEL,
    TEAM_LABEL,
)
from jobs.manifests.context import ManifestContext
from jobs.spec import JobSpec


def object_name(spec: JobSpec, ctx: ManifestContext) -> str:
    """The name of every object built for one job.

    ``spec.name`` is a DNS-1123 label of at most 40 characters (checked when the
    spec is validated), so the job id suffix keeps the name unique and short
    enough for Indexed Job pod hostnames (``<name>-<index>``, at most 63).
    """
    return f"{spec.name}-{ctx.job_id}"


def job_id_selector(job_id: int) -> str:
    """Label selector for every object (and pod) of one job."""
    return f"{JOB_ID_LABEL}={job_id}"


def object_labels(spec: JobSpec, ctx: ManifestContext) -> dict[str, str]:
    """Labels for an object and its pod template; a fresh dict on every call."""
    return {
        MANAGED_BY_LABEL: MANAGED_BY_VALUE,
        NAME_LABEL: spec.name,
        COMPONENT_LABEL: spec.kind,
        JOB_ID_LABEL: str(ctx.job_id),
        TEAM_LABEL: spec.team,
    }


def selector_labels(ctx: ManifestContext) -> dict[str, str]:
    """The one label that picks exactly this job's pods (job ids are unique)."""
    return {JOB_ID_LABEL: str(ctx.job_id)}


def home_claim_name(username: str) -> str:
    """The PersistentVolumeClaim holding a user's workspace home in a team's namespace:
    ``home-<username>``, the username made a DNS label (an SSO username such as
    ``Ana.Lopez@corp`` becomes ``home-ana-lopez-corp-<hash>``: a short hash of the original
    keeps two names that fold to one apart)."""
    folded = re.sub(r"[^a-z0-9]+", "-", username.lower()).strip("-")[:40] or "user"
    if folded == username and len(username) <= 40:
        return f"home-{folded}"
    digest = hashlib.sha256(username.encode()).hexdigest()[:8]
    return f"home-{folded}-{digest}"
