"""Teams, memberships, GPU quotas, the GPU catalog, API tokens and the audit log."""

from __future__ import annotations

from django.conf import settings
from django.core.validators import RegexValidator
from django.db import models

DNS_LABEL = RegexValidator(
    r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$",
    "Use lower-case letters, digits and '-', starting and ending with a letter or digit.",
)

# Quota resources other than GPU products and MIG profiles.
ANY_GPU = "nvidia.com/gpu"
SHARED_GPU = "nvidia.com/gpu.shared"
MIG_PREFIX = "nvidia.com/mig-"
CPU = "cpu"
MEMORY = "memory"


class Team(models.Model):
    name = models.CharField(max_length=100, unique=True)
    slug = models.SlugField(max_length=40, unique=True, validators=[DNS_LABEL])
    namespace = models.CharField(
        max_length=63,
        unique=True,
        blank=True,
        validators=[DNS_LABEL],
        help_text="Kubernetes namespace of the team's jobs; team-<slug> when left empty.",
    )
    description = models.TextField(blank=True)
    members: models.ManyToManyField[models.Model, Membership] = models.ManyToManyField(
        settings.AUTH_USER_MODEL, through="Membership", related_name="teams"
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["slug"]

    def __str__(self) -> str:
        return self.slug


class Membership(models.Model):
    class Role(models.TextChoices):
        MEMBER = "member", "Member"
        LEAD = "lead", "Lead"

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="memberships"
    )
    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="memberships")
    role = models.CharField(max_length=10, choices=Role.choices, default=Role.MEMBER)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["user", "team"], name="membership_unique_user_team")
        ]
        ordering = ["team__slug", "user__username"]

    def __str__(self) -> str:
        return f"{self.user} in {self.team} ({self.role})"


class GpuQuota(models.Model):
    """A ceiling on what a team's admitted jobs may hold at once.

    ``resource`` is ``nvidia.com/gpu`` (exclusive GPUs of any product), a GPU
    product (``NVIDIA-A100-SXM4-80GB``: exclusive GPUs of that product),
    a MIG resource (``nvidia.com/mig-1g.10gb``), ``nvidia.com/gpu.shared``
    (time-sliced GPUs), ``cpu`` (cores) or ``memory`` (GiB).
    """

    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="quotas")
    resource = models.CharField(max_length=100)
    limit = models.PositiveIntegerField(help_text="Whole number: GPUs, slices, cores or GiB.")
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["team", "resource"], name="quota_unique_team_resource")
        ]
        ordering = ["team__slug", "resource"]
        verbose_name = "GPU quota"

    def __str__(self) -> str:
        return f"{self.team}: {self.limit} × {self.resource}"


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
        return f"{MIG_PREFIX}{self.name}"


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


class AuditLog(models.Model):
    actor = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL
    )
    action = models.CharField(max_length=50, db_index=True)
    target_type = models.CharField(max_length=50, blank=True)
    target = models.CharField(max_length=200, blank=True)
    changes = models.JSONField(default=dict, blank=True)
    ip_address = models.GenericIPAddressField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True, db_index=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        verbose_name = "audit log entry"
        verbose_name_plural = "audit log"

    def __str__(self) -> str:
        return f"{self.created_at:%Y-%m-%d %H:%M} {self.actor} {self.action} {self.target}"


class ApiToken(models.Model):
    """An API token; only its SHA-256 digest is stored, the secret is shown once."""

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="api_tokens"
    )
    prefix = models.CharField(max_length=12, db_index=True)
    digest = models.CharField(max_length=64, unique=True)
    description = models.CharField(max_length=100, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    expires_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)
    last_used_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]
        verbose_name = "API token"

    def __str__(self) -> str:
        return f"{self.prefix}… ({self.user})"
