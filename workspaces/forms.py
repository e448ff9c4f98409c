"""The form that creates a workspace (every rule is ``job_spec_check``'s, as for the API)."""

from __future__ import annotations

from typing import Any, cast

from django import forms

from jobs.forms import JobForm


class WorkspaceForm(JobForm):
    """A new workspace: the job form's GPU, resource and storage fields, and a workspace
    image instead of an image, command and runtime (the image gives those)."""

    kind = None  # type: ignore[assignment]
    image = None  # type: ignore[assignment]
    command = None  # type: ignore[assignment]
    args = None  # type: ignore[assignment]
    checkpoint = None  # type: ignore[assignment]
    launcher = None  # type: ignore[assignment]
    workers = None  # type: ignore[assignment]
    max_runtime_seconds = None  # type: ignore[assignment]
    retries = None  # type: ignore[assignment]
    replicas = None  # type: ignore[assignment]
    port = None  # type: ignore[assignment]
    health_path = None  # type: ignore[assignment]
    workspace_image = forms.ChoiceField(label="Workspace image")

    SECTIONS = (
        ("Basics", ("team", "name", "workspace_image", "env")),
        ("GPUs", ("gpu_count", "gpu_sharing", "gpu_product", "gpu_mig_profile")),
        ("Resources", ("cpu", "memory")),
        ("Scheduling", ("priority", "cluster")),
        ("Storage", ("volumes",)),
    )

    def __init__(self, *args: Any, images: list[tuple[str, str]], **kwargs: Any) -> None:
        kwargs.setdefault("launchers", [])
        super().__init__(*args, **kwargs)
        cast(forms.ChoiceField, self.fields["workspace_image"]).choices = images
        self.fields["name"].widget.attrs["placeholder"] = "explore"
        self.fields["gpu_sharing"].initial = "shared"

    def to_spec_data(self) -> dict[str, Any]:
        data = self.cleaned_data
        return {
            "team": data["team"],
            "name": data["name"].strip(),
            "kind": "workspace",
            "workspace_image": data["workspace_image"],
            **self.pod_fields(),
        }
