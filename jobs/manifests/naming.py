"""Deterministic object names and the labels every generated object carries.

Other code lists and watches cluster objects by these labels, so the keys are
constants here and nowhere else.
"""

from __future__ import annotations

from jobs.manifests.context import ManifestContext
from jobs.spec import JobSpec

MANAGED_BY_LABEL = "app.kubernetes.io/managed-by"
MANAGED_BY_VALUE = "gpu-portal"
NAME_LABEL = "app.kubernetes.io/name"
COMPONENT_LABEL = "app.kubernetes.io/component"
JOB_ID_LABEL = "gpu-portal.dev/job-id"
TEAM_LABEL = "gpu-portal.dev/team"

MANAGED_BY_SELECTOR = f"{MANAGED_BY_LABEL}={MANAGED_BY_VALUE}"


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
