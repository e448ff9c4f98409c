"""Teams, their members and GPU quotas, and the audit log of who changed what."""

from __future__ import annotations

from decimal import Decimal

from django.conf import settings
from django.core.validators import MinValueValidator, RegexValidator
from django.db import models

DNS_LABEL = RegexValidator(
    r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$",
    "Use lower-case letters, digits and '-', starting and ending with a letter or digit.",
)


class Cohort(models.Model):
    """A group of teams that lend each other the quota they leave unused (Kueue's cohort).

    A team belongs to at most one; a team without a cohort uses its own quota only.
    """

    name = models.CharField(max_length=100, unique=True)
    slug = models.SlugField(max_length=40, unique=True, validators=[DNS_LABEL])
    description = models.TextField(blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["slug"]

    def __str__(self) -> str:
        return self.slug


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
    cohort = models.ForeignKey(
        Cohort,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="teams",
        help_text="Teams of a cohort borrow each other's unused quota.",
    )
    weight = models.DecimalField(
        max_digits=6,
        decimal_places=2,
        default=Decimal(1),
        validators=[MinValueValidator(Decimal(0))],
        help_text="Fair-sharing weight among the cohort's borrowers: a team of weight 2 may "
        "borrow twice the share of a team of weight 1 before it yields. 0: borrows last.",
    )
    inference_may_borrow = models.BooleanField(
        default=False,
        help_text="Let inference deployments run on borrowed quota (a lender reclaiming its "
        "GPUs may then evict them). Training jobs always may.",
    )

    class IdlePolicy(models.TextChoices):
        OFF = "off", "Off"
        REPORT = "report", "Report only"
        ACT = "act", "Warn, then act"

    idle_policy = models.CharField(
        max_length=10,
        choices=IdlePolicy.choices,
        default=IdlePolicy.REPORT,
        help_text="Jobs holding GPUs idle: report them (timeline and notification), or warn "
        "their owners and, still idle after the grace period, stop training jobs (cancelled) "
        "and scale inference deployments to zero (resumable in one click).",
    )
    idle_threshold_percent = models.FloatField(
        null=True,
        blank=True,
        validators=[MinValueValidator(0.0)],
        help_text="Idle: every GPU of the job under this utilisation (%) for the window. "
        "Empty: the portal's IDLE_GPU_THRESHOLD_PERCENT.",
    )
    idle_window_minutes = models.FloatField(
        null=True,
        blank=True,
        validators=[MinValueValidator(0.05)],
        help_text="For this long. Empty: the portal's IDLE_GPU_WINDOW_MINUTES.",
    )
    idle_grace_minutes = models.FloatField(
        default=60.0,
        validators=[MinValueValidator(0.0)],
        help_text="With 'warn, then act': how long after the warning the job is stopped if "
        "its GPUs stay idle.",
    )
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
    limit = models.PositiveIntegerField(
        "nominal", help_text="Guaranteed quota. Whole number: GPUs, slices, cores or GiB."
    )
    borrowing_limit = models.PositiveIntegerField(
        null=True,
        blank=True,
        help_text="How much above nominal the team may borrow from its cohort; "
        "empty: as much as the cohort leaves unused.",
    )
    lending_limit = models.PositiveIntegerField(
        null=True,
        blank=True,
        help_text="How much of its nominal quota the team lends its cohort; empty: all of it.",
    )
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["team", "resource"], name="quota_unique_team_resource"),
            models.CheckConstraint(
                condition=models.Q(lending_limit__isnull=True)
                | models.Q(lending_limit__lte=models.F("limit")),
                name="quota_lending_within_nominal",
                violation_error_message="The lending limit cannot be more than the nominal "
                "quota: a team lends only what it has.",
            ),
        ]
        ordering = ["team__slug", "resource"]
        verbose_name = "GPU quota"

    def __str__(self) -> str:
        return f"{self.team}: {self.limit} × {self.resource}"

    @property
    def nominal(self) -> int:
        return self.limit


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
