"""Teams, their members and GPU quotas, and the audit log of who changed what."""

from __future__ import annotations

from decimal import Decimal
from typing import TYPE_CHECKING

from django.conf import settings
from django.core.validators import MinValueValidator, RegexValidator
from django.db import models

if TYPE_CHECKING:
    from cluster.models import Cluster

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

    spill_over_minutes = models.PositiveIntegerField(
        null=True,
        blank=True,
        help_text="With several clusters: a job for any cluster still waiting for quota this "
        "many minutes after it was placed is moved, once, to another cluster where it would "
        "start now (portal engine). Empty: jobs stay where they were placed.",
    )

    kueue_local_queue = models.CharField(
        max_length=63,
        blank=True,
        validators=[DNS_LABEL],
        help_text="With Kueue run by the platform team (QUEUEING=kueue, KUEUE_MANAGED=false): "
        "the LocalQueue in the team's namespace its jobs go to.",
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
    # Interactive workspaces (docs/workspaces.md): the home folder's size, who may open a
    # member's workspace, whether one may borrow, and when an idle one is stopped.
    workspace_home_size = models.CharField(
        max_length=20,
        default="10Gi",
        validators=[RegexValidator(r"^[1-9][0-9]{0,5}(Mi|Gi|Ti)$", "Use e.g. 10Gi or 500Mi.")],
        help_text="The size of the home folder (a PersistentVolumeClaim per member) created "
        "the first time a member starts a workspace in this team.",
    )
    workspace_leads_may_open = models.BooleanField(
        default=False,
        help_text="Let the team's leads open their members' workspaces through the portal "
        "(off: only the owner can).",
    )
    workspace_may_borrow = models.BooleanField(
        default=False,
        help_text="Let workspaces run on borrowed quota (a lender reclaiming its GPUs may then "
        "stop them). Off: a workspace waits for the team's own quota and is never reclaimed.",
    )

    class WorkspaceIdle(models.TextChoices):
        BOTH = "both", "No user activity and GPUs idle"
        ACTIVITY = "activity", "No user activity"
        GPU = "gpu", "GPUs idle"
        OFF = "off", "Never"

    workspace_idle = models.CharField(
        max_length=10,
        choices=WorkspaceIdle.choices,
        default=WorkspaceIdle.BOTH,
        help_text="When a workspace counts as idle: no activity in its server (typing, "
        "running cells, open terminals) for the idle minutes AND its GPUs under the team's "
        "idle threshold for its window (both, the default), one of the two, or never.",
    )
    workspace_idle_minutes = models.FloatField(
        default=60.0,
        validators=[MinValueValidator(1.0)],
        help_text="No user activity for this long counts as idle.",
    )
    workspace_grace_minutes = models.FloatField(
        default=15.0,
        validators=[MinValueValidator(0.0)],
        help_text="How long after the warning an idle workspace is stopped (home kept).",
    )
    workspace_max_hours = models.FloatField(
        null=True,
        blank=True,
        default=168.0,
        validators=[MinValueValidator(0.1)],
        help_text="A workspace running this long is warned, then stopped after the grace "
        "period, busy or not. Empty: no limit.",
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


class GroupMapping(models.Model):
    """An identity-provider group and what it gives on every single sign-on: membership of
    a team (member or lead), or platform admin. Memberships of users who sign on follow
    their groups: added when a mapped group appears, removed when it disappears."""

    group = models.CharField(
        max_length=200, help_text="The group's name as the provider sends it (e.g. ml-vision)."
    )
    team = models.ForeignKey(
        Team, null=True, blank=True, on_delete=models.CASCADE, related_name="group_mappings"
    )
    role = models.CharField(
        max_length=10, choices=Membership.Role.choices, default=Membership.Role.MEMBER
    )
    platform_admin = models.BooleanField(
        default=False, help_text="Members of the group are platform admins (no team needed)."
    )

    class Meta:
        ordering = ["group", "team__slug"]
        verbose_name = "identity-provider group"
        constraints = [
            models.CheckConstraint(
                condition=models.Q(team__isnull=False) | models.Q(platform_admin=True),
                name="groupmapping_team_or_admin",
            ),
            models.UniqueConstraint(
                fields=["group", "team"], name="groupmapping_unique_group_team"
            ),
        ]

    def __str__(self) -> str:
        gives = [f"{self.role} of {self.team.slug}"] if self.team else []
        if self.platform_admin:
            gives.append("platform admin")
        return f"{self.group} → {', '.join(gives)}"


class SsoIdentity(models.Model):
    """Who a user is at the identity provider (issuer and subject): the key a sign-on finds
    the user by, whatever their name or email becomes."""

    user = models.OneToOneField(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="sso_identity"
    )
    issuer = models.CharField(max_length=300)
    subject = models.CharField(max_length=255)
    groups = models.JSONField(default=list, help_text="The groups of the last sign-on.")
    last_login = models.DateTimeField(null=True, blank=True)

    class Meta:
        verbose_name = "single sign-on identity"
        verbose_name_plural = "single sign-on identities"
        constraints = [
            models.UniqueConstraint(fields=["issuer", "subject"], name="ssoidentity_unique_sub")
        ]

    def __str__(self) -> str:
        return f"{self.subject} at {self.issuer}"


class GpuQuotaQuerySet(models.QuerySet["GpuQuota"]):
    def on_cluster(self, cluster_id: int, *, first: bool) -> GpuQuotaQuerySet:
        """The quotas on one cluster (``first``: the portal's first cluster, whose rows have
        no cluster)."""
        if first:
            return self.filter(models.Q(cluster_id=cluster_id) | models.Q(cluster__isnull=True))
        return self.filter(cluster_id=cluster_id)

    def of(self, cluster: Cluster | None) -> GpuQuotaQuerySet:
        """The quotas of ``cluster`` (the first with ``None``; its rows have no cluster)."""
        if cluster is None or cluster.is_first:
            return self.filter(cluster__isnull=True)
        return self.filter(cluster=cluster)


class GpuQuota(models.Model):
    """A ceiling on what a team's admitted jobs may hold at once.

    ``resource`` is ``nvidia.com/gpu`` (exclusive GPUs of any product), a GPU
    product (``NVIDIA-A100-SXM4-80GB``: exclusive GPUs of that product),
    a MIG resource (``nvidia.com/mig-1g.10gb``), ``nvidia.com/gpu.shared``
    (time-sliced GPUs), ``cpu`` (cores) or ``memory`` (GiB).
    """

    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="quotas")
    # The cluster whose GPUs it is a share of (as Kueue's ClusterQueues, and Run:ai's
    # quotas, are per cluster); empty: the portal's first cluster (every quota from
    # before several clusters).
    cluster = models.ForeignKey(
        "cluster.Cluster",
        on_delete=models.CASCADE,
        null=True,
        blank=True,
        related_name="quotas",
        help_text="Empty: the first cluster.",
    )
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

    objects = GpuQuotaQuerySet.as_manager()

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["team", "cluster", "resource"],
                name="quota_unique_team_cluster_resource",
                nulls_distinct=False,  # one first-cluster row per team and resource
            ),
            models.CheckConstraint(
                condition=models.Q(lending_limit__isnull=True)
                | models.Q(lending_limit__lte=models.F("limit")),
                name="quota_lending_within_nominal",
                violation_error_message="The lending limit cannot be more than the nominal "
                "quota: a team lends only what it has.",
            ),
        ]
        ordering = ["team__slug", "cluster__name", "resource"]
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
