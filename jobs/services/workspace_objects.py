"""What the apply pipeline needs of a workspace (the rest of the feature is the
``workspaces`` app's): its image, the context its manifests are built with, its server's
token and the objects applying it creates (its home claim first)."""

from __future__ import annotations

from cluster.labels import MANAGED_BY_LABEL, MANAGED_BY_VALUE, TEAM_LABEL
from core.errors import ApplicationError
from jobs.manifests.context import WorkspaceContext
from jobs.manifests.naming import home_claim_name
from jobs.manifests.workspace import TOKEN_KEY, home_claim
from jobs.models import Job, WorkspaceImage
from jobs.selectors.workspace_access import WORKSPACE_PATH, workspace_token


def workspace_image_get(*, name: str) -> WorkspaceImage:
    """The enabled workspace image of that name; an error naming the choices otherwise."""
    found = WorkspaceImage.objects.filter(name=name, enabled=True).first()
    if found is None:
        names = ", ".join(
            WorkspaceImage.objects.filter(enabled=True).values_list("name", flat=True)
        )
        raise ApplicationError(
            f"workspace_image: there is no workspace image '{name}'; use one of: "
            f"{names or 'none (ask an admin to add one)'}.",
            field_errors={"workspace_image": [f"Use one of: {names or 'none'}."]},
        )
    return found


def workspace_context(*, image: WorkspaceImage, username: str, job_id: int) -> WorkspaceContext:
    return WorkspaceContext(
        flavor=image.flavor,
        command=tuple(str(c) for c in image.command or ()),
        port=image.port,
        home_path=image.home_path,
        home_claim=home_claim_name(username),
        base_url=WORKSPACE_PATH.format(id=job_id),
    )


def workspace_objects_prepare(*, job: Job) -> list[dict]:
    """What applying a workspace creates: its home claim first (created on first use, at
    the team's size, never replaced), then its stored manifests with the token filled into
    its Secret. Raises ``kube`` errors as any apply does."""
    team = job.team
    claim = home_claim(
        name=home_claim_name(job.owner.get_username()),
        namespace=job.namespace,
        size=team.workspace_home_size,
        labels={MANAGED_BY_LABEL: MANAGED_BY_VALUE, TEAM_LABEL: team.slug},
        owner=job.owner.get_username(),
    )
    manifests = [claim]
    for manifest in job.manifests:
        if manifest["kind"] == "Secret":
            manifest = {**manifest, "stringData": {TOKEN_KEY: workspace_token(job)}}
        manifests.append(manifest)
    return manifests
