"""The GPU catalog: what the cluster offers, discovered from its nodes and kept by admins."""

from __future__ import annotations

from django.conf import settings
from django.core.validators import RegexValidator
from django.db import models

from scheduling.resources import ANY_GPU, SHARED_GPU, mig_resource


class GpuProduct(models.Model):
    """A GPU model the cluster offers, keyed by GFD's ``nvidia.com/gpu.product`` label value."""

    name = models.CharField(max_length=100, unique=True)
    memory_mib = models.PositiveIntegerField(help_text="Framebuffer per GPU, MiB.")
    gpus_per_node = models.PositiveIntegerField(help_text="Most GPUs of this product on one node.")
    description = models.CharField(max_length=200, blank=True)
    enabled = models.BooleanField(default=True)

    class Meta:
        ordering = ["name"]
        verbose_name = "GPU product"

    def __str__(self) -> str:
        return self.name


class MigProfile(models.Model):
    """A MIG instance profile (``1g.10gb``) the cluster exposes as ``nvidia.com/mig-<name>``."""

    name = models.CharField(
        max_length=30,
        unique=True,
        validators=[RegexValidator(r"^[1-7]g\.[0-9]+gb$", "A MIG profile looks like 1g.10gb.")],
    )
    memory_gib = models.PositiveIntegerField()
    max_per_node = models.PositiveIntegerField(
        default=56, help_text="Most instances of this profile on one node."
    )
    enabled = models.BooleanField(default=True)

    class Meta:
        ordering = ["name"]
        verbose_name = "MIG profile"

    def __str__(self) -> str:
        return self.name

    @property
    def resource(self) -> str:
        return mig_resource(self.name)


class CatalogSettings(models.Model):
    """Cluster-wide catalog settings (a single row)."""

    class SharedResource(models.TextChoices):
        RENAMED = SHARED_GPU, "nvidia.com/gpu.shared (time-slicing with renameByDefault)"
        PLAIN = ANY_GPU, "nvidia.com/gpu (time-slicing without renameByDefault)"

    shared_gpu_resource = models.CharField(
        max_length=40, choices=SharedResource.choices, default=SharedResource.RENAMED
    )
    max_shared_per_node = models.PositiveIntegerField(
        default=16, help_text="Most time-sliced GPU replicas on one node."
    )
    node_capacity = models.JSONField(
        default=dict,
        blank=True,
        editable=False,
        help_text="Discovered from the nodes: the most cpu (millicores) and memory (bytes) one "
        "node of each kind offers, so a request no node could ever hold is refused at "
        "submission.",
    )
    allowed_registries = models.TextField(
        blank=True,
        help_text="Image registries jobs may pull from, one per line (e.g. nvcr.io); "
        "empty allows any registry.",
    )

    class Meta:
        verbose_name = "catalog settings"
        verbose_name_plural = "catalog settings"

    def __str__(self) -> str:
        return "GPU catalog settings"

    @property
    def registries(self) -> list[str]:
        return [line.strip() for line in self.allowed_registries.splitlines() if line.strip()]


class GpuChange(models.Model):
    """A change of one node's GPU shape that the portal drives from start to finish: a MIG
    layout (``nvidia.com/mig.config``) or a device plugin config
    (``nvidia.com/device-plugin.config``). At most one is under way per node."""

    class Kind(models.TextChoices):
        MIG = "mig", "MIG layout"
        TIME_SLICING = "time-slicing", "Time-slicing config"

    class Displace(models.TextChoices):
        EVICT = "evict", "Move its jobs away now (re-queued, nothing lost)"
        WAIT = "wait", "Wait for its jobs to finish"

    class Phase(models.TextChoices):
        DRAINING = "draining", "Draining"  # cordoned; its GPU pods are going
        APPLYING = "applying", "Applying"  # label set; the operator is at work
        SUCCEEDED = "succeeded", "Succeeded"
        FAILED = "failed", "Failed"

    ACTIVE = (Phase.DRAINING, Phase.APPLYING)

    node = models.CharField(max_length=253, db_index=True)
    kind = models.CharField(max_length=20, choices=Kind.choices)
    old_value = models.CharField(max_length=100, blank=True)
    new_value = models.CharField(max_length=100)
    displace = models.CharField(max_length=10, choices=Displace.choices)
    phase = models.CharField(max_length=10, choices=Phase.choices, default=Phase.DRAINING)
    # The node was cordoned before the change (by an admin): it stays cordoned after.
    was_cordoned = models.BooleanField(default=False)
    displaced = models.JSONField(default=list, blank=True, help_text="Ids of the jobs moved.")
    # What the node should advertise once the change is in force (resource → count), where
    # that is how its end is told (a device plugin config).
    expected = models.JSONField(default=dict, blank=True)
    message = models.TextField(blank=True)
    requested_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL
    )
    created_at = models.DateTimeField(auto_now_add=True)
    labelled_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        verbose_name = "GPU change"
        constraints = [
            models.UniqueConstraint(
                fields=["node"],
                condition=models.Q(phase__in=["draining", "applying"]),
                name="one_gpu_change_per_node",
            )
        ]

    def __str__(self) -> str:
        return f"{self.node}: {self.old_value or '?'} → {self.new_value}"

    @property
    def active(self) -> bool:
        return self.phase in self.ACTIVE
