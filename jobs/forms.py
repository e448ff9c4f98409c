"""The submit form: browser fields ↔ the JSON job spec.

The form only reshapes input; every rule lives in ``job_spec_check``, so the
form and the API refuse exactly the same things with the same messages.
"""

from __future__ import annotations

import shlex
from typing import Any, cast

from django import forms
from django.conf import settings

from cluster.priority_classes import PRIORITIES
from cluster.selectors import Catalog
from jobs.spec import KINDS
from scheduling.quantity import human_quantity
from teams.models import Team

# Spec field path (first segment) → form field showing its error.
FIELD_FOR_PATH = {
    "gpu.count": "gpu_count",
    "gpu.product": "gpu_product",
    "gpu.sharing": "gpu_sharing",
    "gpu.mig_profile": "gpu_mig_profile",
}


LAUNCHER_LABELS = {
    "job": "Job (the portal's own; torchrun env for workers)",
    "pytorchjob": "PyTorchJob (Kubeflow training operator)",
    "trainjob": "TrainJob (Kubeflow Trainer)",
}


class JobForm(forms.Form):
    # basics
    team = forms.ChoiceField()
    name = forms.CharField(
        max_length=200,
        help_text="Lower-case letters, digits and '-' (at most 40).",
        widget=forms.TextInput(attrs={"placeholder": "resnet50-run1", "autocomplete": "off"}),
    )
    # Workspaces have their own form (WorkspaceForm, on the Workspaces page).
    kind = forms.ChoiceField(
        choices=[(k, k.title()) for k in KINDS if k != "workspace"], initial="training"
    )
    image = forms.CharField(
        max_length=255,
        widget=forms.TextInput(attrs={"placeholder": "nvcr.io/nvidia/pytorch:24.05-py3"}),
    )
    command = forms.CharField(
        required=False,
        help_text="Shell-style words, e.g. torchrun train.py",
        widget=forms.TextInput(attrs={"placeholder": "python train.py"}),
    )
    args = forms.CharField(required=False, help_text="Shell-style words, e.g. --epochs 10")
    env = forms.CharField(
        required=False,
        widget=forms.Textarea(attrs={"rows": 3, "placeholder": "WANDB_PROJECT=resnet\nSEED=1"}),
        help_text="One KEY=value per line.",
    )
    # GPUs
    gpu_count = forms.CharField(initial="1", label="GPUs per pod", max_length=20)
    gpu_sharing = forms.ChoiceField(
        label="Sharing",
        initial="exclusive",
        choices=[
            ("exclusive", "Exclusive whole GPUs"),
            ("mig", "MIG slice"),
            ("shared", "Time-sliced (shared) GPU"),
        ],
    )
    gpu_product = forms.ChoiceField(label="GPU product", required=False)
    gpu_mig_profile = forms.ChoiceField(label="MIG profile", required=False)
    # resources
    cpu = forms.CharField(required=False, max_length=20, label="CPU per pod")
    memory = forms.CharField(required=False, max_length=20, label="Memory per pod")
    # scheduling
    priority = forms.ChoiceField(choices=[(p, p.title()) for p in PRIORITIES], initial="normal")
    cluster = forms.ChoiceField(
        required=False,  # not sent: any
        initial="any",
        help_text="Where it runs: any (where it would start soonest), or a cluster by name.",
    )
    # storage
    volumes = forms.CharField(
        required=False,
        widget=forms.Textarea(
            attrs={"rows": 2, "placeholder": "imagenet:/data:ro\ncheckpoints:/ckpt"}
        ),
        help_text="One PersistentVolumeClaim per line: claim:/mount/path, add :ro for read-only.",
    )
    checkpoint = forms.CharField(
        required=False,
        max_length=530,
        label="Checkpoint volume",
        widget=forms.TextInput(attrs={"placeholder": "checkpoints:/checkpoints"}),
        help_text="Training: claim:/mount/path. The container gets CHECKPOINT_DIR and "
        "RESTART_ATTEMPT; after a GPU failure the portal runs it again elsewhere.",
    )
    # runtime — training
    launcher = forms.ChoiceField(
        required=False,
        help_text="What runs a training job: the portal's own Job, or an operator the "
        "cluster runs (only those it serves are offered).",
    )
    workers = forms.IntegerField(required=False, min_value=1, initial=1, label="Workers (pods)")
    max_runtime_seconds = forms.IntegerField(required=False, label="Max runtime (seconds)")
    retries = forms.IntegerField(required=False, min_value=0, initial=0)
    # runtime — inference
    replicas = forms.IntegerField(required=False, min_value=1, initial=1)
    port = forms.IntegerField(required=False, initial=8080)
    health_path = forms.CharField(required=False, initial="/healthz", max_length=256)

    SECTIONS: tuple[tuple[str, tuple[str, ...]], ...] = (
        ("Basics", ("team", "name", "kind", "image", "command", "args", "env")),
        ("GPUs", ("gpu_count", "gpu_sharing", "gpu_product", "gpu_mig_profile")),
        ("Resources", ("cpu", "memory")),
        ("Scheduling", ("priority", "cluster")),
        ("Storage", ("volumes", "checkpoint")),
        (
            "Runtime",
            (
                "launcher",
                "workers",
                "max_runtime_seconds",
                "retries",
                "replicas",
                "port",
                "health_path",
            ),
        ),
    )

    def __init__(
        self,
        *args: Any,
        teams: list[Team],
        catalog: Catalog,
        launchers: list[str] | None = None,
        clusters: list[tuple[str, str]] | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(*args, **kwargs)
        cast(forms.ChoiceField, self.fields["team"]).choices = [(t.slug, t.name) for t in teams]
        cast(forms.ChoiceField, self.fields["cluster"]).choices = [
            ("any", "Any: where it would start soonest"),
            *(clusters or []),
        ]
        if "launcher" in self.fields:
            cast(forms.ChoiceField, self.fields["launcher"]).choices = [
                (name, LAUNCHER_LABELS[name])
                for name in dict.fromkeys(
                    [settings.DEFAULT_TRAINING_LAUNCHER, "job", *(launchers or [])]
                )
                if name == "job" or name in (launchers or [])
            ]
            self.fields["launcher"].initial = settings.DEFAULT_TRAINING_LAUNCHER
        cast(forms.ChoiceField, self.fields["gpu_product"]).choices = [("", "Any GPU")] + [
            # GPU Feature Discovery reports MiB: 81,559 MiB is 79.6 GiB (sold as "80 GB").
            (name, f"{name} ({human_quantity(p.memory_mib * 2**20, 'memory')})")
            for name, p in sorted(catalog.products.items())
        ]
        cast(forms.ChoiceField, self.fields["gpu_mig_profile"]).choices = [("", "—")] + [
            (name, name) for name in sorted(catalog.mig_profiles)
        ]
        self.fields["cpu"].widget.attrs["placeholder"] = "default per GPU"
        self.fields["memory"].widget.attrs["placeholder"] = "default per GPU"

    def sections(self) -> list[tuple[str, list[forms.BoundField]]]:
        return [(title, [self[name] for name in names]) for title, names in self.SECTIONS]

    def to_spec_data(self) -> dict[str, Any]:
        """The JSON spec these fields describe (call after ``is_valid``)."""
        data = self.cleaned_data
        spec: dict[str, Any] = {
            "team": data["team"],
            "name": data["name"].strip(),
            "kind": data["kind"],
            "image": data["image"].strip(),
            "command": _words(self, "command"),
            "args": _words(self, "args"),
            **self.pod_fields(),
        }
        runtime = (
            ("launcher", "workers", "max_runtime_seconds", "retries")
            if data["kind"] == "training"
            else ("replicas", "port", "health_path")
        )
        for field in runtime:
            if data.get(field) not in (None, ""):
                spec[field] = data[field]
        checkpoint = _checkpoint(self)
        if checkpoint is not None:
            spec["checkpoint"] = checkpoint  # an inference job's is refused by the spec check
        return spec

    def pod_fields(self) -> dict[str, Any]:
        """The fields every kind shares: env, GPUs, resources, priority, volumes."""
        data = self.cleaned_data
        return {
            "env": _env(self),
            "gpu": {
                "count": data["gpu_count"].strip() or "0",
                "sharing": data["gpu_sharing"],
                "product": data["gpu_product"] or None,
                "mig_profile": data["gpu_mig_profile"] or None,
            },
            "cpu": data["cpu"].strip() or None,
            "memory": data["memory"].strip() or None,
            "priority": data["priority"],
            "cluster": data.get("cluster") or "any",
            "volumes": _volumes(self),
        }

    def add_spec_errors(self, field_errors: dict[str, list[str]], message: str) -> None:
        """Show the spec validator's errors on the fields they name."""
        if not field_errors:
            self.add_error(None, message)
        for path, messages in field_errors.items():
            field = FIELD_FOR_PATH.get(path) or path.split(".")[0].split("[")[0]
            if field not in self.fields:
                field = None  # type: ignore[assignment]
            for text in messages:
                prefix = "" if field else f"{path}: "
                self.add_error(field, prefix + text)


def _words(form: JobForm, field: str) -> list[str]:
    raw = form.cleaned_data.get(field) or ""
    try:
        return shlex.split(raw)
    except ValueError as exc:
        form.add_error(field, f"Unbalanced quotes ({exc}); close every quote you open.")
        return []


def _env(form: JobForm) -> dict[str, str]:
    env: dict[str, str] = {}
    for number, line in enumerate((form.cleaned_data.get("env") or "").splitlines(), start=1):
        if not line.strip():
            continue
        key, sep, value = line.partition("=")
        if not sep:
            form.add_error("env", f"Line {number}: write KEY=value.")
            continue
        env[key.strip()] = value
    return env


def _checkpoint(form: JobForm) -> dict[str, str] | None:
    raw = (form.cleaned_data.get("checkpoint") or "").strip()
    if not raw:
        return None
    claim, sep, path = raw.partition(":")
    if not sep or not claim or not path:
        form.add_error("checkpoint", "Write claim:/mount/path, e.g. checkpoints:/checkpoints.")
        return None
    return {"claim": claim, "mount_path": path}


def _volumes(form: JobForm) -> list[dict[str, Any]]:
    volumes = []
    for number, line in enumerate((form.cleaned_data.get("volumes") or "").splitlines(), start=1):
        if not line.strip():
            continue
        parts = line.strip().split(":")
        read_only = len(parts) == 3 and parts[2] == "ro"
        if len(parts) not in (2, 3) or (len(parts) == 3 and parts[2] not in ("ro", "rw")):
            form.add_error("volumes", f"Line {number}: write claim:/mount/path or claim:/path:ro.")
            continue
        volumes.append({"claim": parts[0], "mount_path": parts[1], "read_only": read_only})
    return volumes


def initial_from_spec(spec: dict[str, Any]) -> dict[str, Any]:
    """Form initial values reproducing a stored spec (for "Clone")."""
    gpu = spec.get("gpu") or {}
    initial = {
        key: spec.get(key)
        for key in (
            "team",
            "name",
            "kind",
            "image",
            "cpu",
            "memory",
            "priority",
            "cluster",
            "launcher",
            "workers",
            "max_runtime_seconds",
            "retries",
            "replicas",
            "port",
            "health_path",
        )
        if spec.get(key) is not None
    }
    initial.update(
        command=shlex.join(spec.get("command") or []),
        args=shlex.join(spec.get("args") or []),
        env="\n".join(f"{k}={v}" for k, v in (spec.get("env") or {}).items()),
        gpu_count=str(gpu.get("count", 0)),
        gpu_sharing=gpu.get("sharing", "exclusive"),
        gpu_product=gpu.get("product") or "",
        gpu_mig_profile=gpu.get("mig_profile") or "",
        volumes="\n".join(
            f"{v['claim']}:{v['mount_path']}" + (":ro" if v.get("read_only") else "")
            for v in spec.get("volumes") or []
        ),
        checkpoint=(
            f"{spec['checkpoint']['claim']}:{spec['checkpoint']['mount_path']}"
            if spec.get("checkpoint")
            else ""
        ),
    )
    return initial
