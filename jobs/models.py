"""Jobs and their timelines."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.conf import settings
from django.db import models
from django.db.models import F, Q, Window
from django.db.models.functions import RowNumber
from django.utils import timezone

from cluster.priority_classes import PRIORITY_CLASS_VALUES
from core.queueing import Queueing
from teams.models import Team


class JobState(models.TextChoices):
    QUEUED = "queued", "Queued"
    PENDING = "pending", "Pending"
    RUNNING = "running", "Running"
    SUCCEEDED = "succeeded", "Succeeded"
    FAILED = "failed", "Failed"
    CANCELLED = "cancelled", "Cancelled"
    # A workspace its owner (or the idle policy) stopped: no pods, no quota held, its home
    # folder kept; started again, it queues for admission like a new job.
    STOPPED = "stopped", "Stopped"


FINAL_STATES = frozenset({JobState.SUCCEEDED, JobState.FAILED, JobState.CANCELLED})
ACTIVE_STATES = frozenset({JobState.QUEUED, JobState.PENDING, JobState.RUNNING})
# Not final: queued, pending, running, or a stopped workspace that may start again.
LIVE_STATES = frozenset(JobState) - FINAL_STATES

# The queue order, the one place it is spelled: higher priority first, then first come (the
# submission time, then the id for jobs submitted in the same instant). Admission walks it,
# a job's place is counted in it, and Kueue's decisions are explained in it.
QUEUE_ORDER = ("-priority_value", "created_at", "pk")
QUEUE_ORDER_SQL = "priority_value DESC, created_at, id"  # the same, for raw SQL windows


def queue_key(priority: int, created_at: datetime, pk: int) -> tuple[int, datetime, int]:
    """A queued job's place in the queue order, for sorting in Python: lower goes first."""
    return (-priority, created_at, pk)


class JobQuerySet(models.QuerySet["Job"]):
    def on_cluster(self, cluster_id: int | None, *, first: bool) -> JobQuerySet:
        """The jobs placed on one cluster (``first``: the portal's first cluster, which also
        holds the rows from before several clusters, their cluster empty)."""
        placed = Q(cluster_id=cluster_id)
        return self.filter(placed | Q(cluster__isnull=True) if first else placed)

    def waiting_for_admission(self, queueing: str | None = None) -> JobQuerySet:
        """Queued and not admitted (by one engine when ``queueing`` says which), in queue
        order."""
        found = self.filter(state=JobState.QUEUED, admitted_at__isnull=True)
        if queueing is not None:
            found = found.filter(queueing=queueing)
        return found.order_by(*QUEUE_ORDER)

    def ahead_of(self, priority: int, created_at: datetime, pk: int) -> JobQuerySet:
        """The jobs before (``priority``, ``created_at``, ``pk``) in the queue order."""
        same = Q(priority_value=priority)
        return self.filter(
            Q(priority_value__gt=priority)
            | (same & Q(created_at__lt=created_at))
            | (same & Q(created_at=created_at, pk__lt=pk))
        )

    def behind(self, priority: int, created_at: datetime, pk: int) -> JobQuerySet:
        """The jobs after (``priority``, ``created_at``, ``pk``) in the queue order."""
        same = Q(priority_value=priority)
        return self.filter(
            Q(priority_value__lt=priority)
            | (same & Q(created_at__gt=created_at))
            | (same & Q(created_at=created_at, pk__gt=pk))
        )

    def first_of_each_team(self, count: int) -> JobQuerySet:
        """The first ``count`` jobs of each team's queue (one statement: a window over the
        queue order)."""
        order: list[Any] = [F(f[1:]).desc() if f[0] == "-" else F(f) for f in QUEUE_ORDER]
        place = Window(RowNumber(), partition_by=[F("team_id")], order_by=order)
        return self.annotate(place=place).filter(place__lte=count)


class Job(models.Model):
    class Kind(models.TextChoices):
        TRAINING = "training", "Training"
        INFERENCE = "inference", "Inference"
        WORKSPACE = "workspace", "Workspace"

    Queueing = Queueing

    team = models.ForeignKey(Team, on_delete=models.PROTECT, related_name="jobs")
    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="gpu_jobs"
    )
    name = models.CharField(max_length=40)
    kind = models.CharField(max_length=10, choices=Kind.choices)
    priority = models.CharField(max_length=10, default="normal")
    # The engine that admits it (settings.QUEUEING when it was submitted): a job keeps its
    # engine while a cluster moves from one to the other (docs/queueing.md).
    queueing = models.CharField(max_length=6, choices=Queueing.choices, default=Queueing.PORTAL)
    # Where it runs: the cluster the spec named, or the one placement chose for ``any``
    # (``jobs.services.placement``). A job stays there: its objects, logs and home folder
    # are in that cluster. Empty only for rows from before several clusters (the first).
    cluster = models.ForeignKey(
        "cluster.Cluster", on_delete=models.PROTECT, null=True, blank=True, related_name="jobs"
    )
    priority_value = models.IntegerField(default=PRIORITY_CLASS_VALUES["normal"])
    state = models.CharField(
        max_length=10, choices=JobState.choices, default=JobState.QUEUED, db_index=True
    )
    reason = models.CharField(max_length=64, blank=True)
    message = models.TextField(blank=True)
    spec = models.JSONField()
    manifests = models.JSONField(default=list)
    # What the job holds against quota while admitted: {"nvidia.com/gpu": 8, "cpu": 64000, ...}
    demand = models.JSONField(default=dict)
    gpu_count = models.PositiveIntegerField(default=0, help_text="GPUs (or slices) in all pods.")
    # Plain-language "why pending" from the scheduling core, beside the scheduler's message.
    advice = models.TextField(blank=True)
    # Where the pods run: {"nodes": [...], "gpu_product": "...", "pods": [{name, node, phase}]}
    placement = models.JSONField(default=dict, blank=True)
    exit_code = models.IntegerField(null=True, blank=True)
    namespace = models.CharField(max_length=63)
    object_name = models.CharField(max_length=63, blank=True)
    cloned_from = models.ForeignKey("self", null=True, blank=True, on_delete=models.SET_NULL)
    # Admitted on quota the cohort lent: a lender reclaiming it may evict the job.
    borrowing = models.BooleanField(default=False)
    evictions = models.PositiveIntegerField(default=0, help_text="Times the portal evicted it.")
    # Set while an eviction is under way: the job is queued again, but its objects (and the
    # quota they hold) are not gone from the cluster yet.
    evicted_at = models.DateTimeField(null=True, blank=True)
    # The runs an eviction ended, [started, released] ISO timestamps each: the GPU-hours
    # they held stay in the accounting after ``started_at`` is cleared for the next run.
    earlier_runs = models.JSONField(default=list, blank=True)
    # Runs again after a GPU failure, and the nodes those failures happened on (avoided).
    gpu_failure_retries = models.PositiveSmallIntegerField(default=0)
    excluded_nodes = models.JSONField(default=list, blank=True)
    # GPU-hours the failures cost: the time since each failed run's last checkpoint.
    gpu_hours_lost = models.FloatField(default=0.0)
    # The idle-GPU policy: when the owner was warned and when the job is to be stopped if
    # its GPUs stay idle (both cleared when they become active); a lead's exemption.
    idle_warned_at = models.DateTimeField(null=True, blank=True)
    idle_action_due = models.DateTimeField(null=True, blank=True)
    idle_exempt_reason = models.CharField(max_length=200, blank=True)
    # A workspace being stopped (with ``evicted_at``: its objects are being deleted): once
    # they are gone it moves to ``stopped`` rather than back into the queue.
    stop_requested_at = models.DateTimeField(null=True, blank=True)
    # ...and what it says once stopped: ``Stopped`` (its owner), ``IdleStopped`` or
    # ``LifetimeStopped`` (the team's rule), with the stop's own message.
    stop_reason = models.CharField(max_length=32, blank=True)
    stop_message = models.TextField(blank=True)
    # An inference deployment the idle-GPU policy scaled to zero: the replicas it resumes with.
    scaled_to_zero_from = models.PositiveIntegerField(null=True, blank=True)
    # Where a training job stands (docs/jobs.md, "Progress and time to finish"):
    # {"percent", "step", "total", "source"}, read from its rank-0 log's
    # GPU_PORTAL_PROGRESS lines; the estimate of the time left, and how it was made.
    progress = models.JSONField(null=True, blank=True)
    eta_seconds = models.FloatField(null=True, blank=True)
    eta_basis = models.CharField(max_length=200, blank=True)
    progress_at = models.DateTimeField(null=True, blank=True)  # its newest progress line
    progress_read_at = models.DateTimeField(null=True, blank=True)  # when the log was read
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)
    admitted_at = models.DateTimeField(null=True, blank=True)
    applied_at = models.DateTimeField(null=True, blank=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    objects = JobQuerySet.as_manager()

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [
            models.Index(fields=["team", "state"], name="job_team_state"),
            models.Index(fields=["state", "-priority_value", "created_at"], name="job_queue_order"),
            # The job list's order, with the team its filter needs: the first pages' ids
            # are read from this index alone. It also serves ranges on created_at.
            models.Index(fields=["-created_at", "-id"], include=["team"], name="job_list_order"),
            # The same order within a team: a deep page (or a team filter) reads and sorts
            # the user's teams' ids from this index alone, never the ~1 KB job rows.
            models.Index(fields=["team", "-created_at", "-id"], name="job_team_list_order"),
        ]

    def __str__(self) -> str:
        return f"{self.team.slug}/{self.name} #{self.pk}"

    @property
    def is_final(self) -> bool:
        return self.state in FINAL_STATES

    @property
    def run_seconds(self) -> float | None:
        """How long it has run (until it finished, or until now); None before it started."""
        if self.started_at is None:
            return None
        end = self.finished_at or timezone.now()
        return max(0.0, (end - self.started_at).total_seconds())

    @property
    def gpu_hours(self) -> float | None:
        """GPUs held × time run: what the job has cost in GPU-hours so far."""
        seconds = self.run_seconds
        return None if seconds is None else self.gpu_count * seconds / 3600


class JobEvent(models.Model):
    """One line of a job's timeline: portal state changes and Kubernetes events."""

    class Source(models.TextChoices):
        PORTAL = "portal", "Portal"
        KUBERNETES = "kubernetes", "Kubernetes"

    job = models.ForeignKey(Job, on_delete=models.CASCADE, related_name="events")
    source = models.CharField(max_length=12, choices=Source.choices, default=Source.PORTAL)
    type = models.CharField(max_length=10, default="Normal")
    reason = models.CharField(max_length=64)
    message = models.TextField(blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    # Kubernetes events are deduplicated on (involved object uid, reason, message).
    dedupe_key = models.CharField(max_length=200, blank=True)

    class Meta:
        ordering = ["created_at", "id"]
        constraints = [
            models.UniqueConstraint(
                fields=["job", "dedupe_key"],
                condition=~models.Q(dedupe_key=""),
                name="jobevent_unique_dedupe",
            )
        ]

    def __str__(self) -> str:
        return f"{self.job_id} {self.reason}"


class JobTemplate(models.Model):
    """A named, saved job spec (any subset of its fields), owned by a user or by a team.

    Submitting from a template merges the caller's fields over the template's and then
    goes through every check a submission does: a template is a starting point, never a
    way around validation, quota or the "will it fit?" answer.
    """

    name = models.CharField(max_length=63)
    description = models.CharField(max_length=200, blank=True)
    spec = models.JSONField(default=dict)
    # Exactly one of the two: a personal template, or a team's (managed by its leads).
    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.CASCADE,
        related_name="job_templates",
    )
    team = models.ForeignKey(
        Team, null=True, blank=True, on_delete=models.CASCADE, related_name="job_templates"
    )
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["name", "id"]
        constraints = [
            models.CheckConstraint(
                condition=models.Q(owner__isnull=False, team__isnull=True)
                | models.Q(owner__isnull=True, team__isnull=False),
                name="jobtemplate_one_owner",
            ),
            models.UniqueConstraint(
                fields=["owner", "name"],
                condition=models.Q(owner__isnull=False),
                name="jobtemplate_unique_personal_name",
            ),
            models.UniqueConstraint(
                fields=["team", "name"],
                condition=models.Q(team__isnull=False),
                name="jobtemplate_unique_team_name",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.scope}/{self.name}"

    @property
    def scope(self) -> str:
        """``team:<slug>`` or ``user:<username>``: whose template it is."""
        if self.team is not None:
            return f"team:{self.team.slug}"
        return f"user:{self.owner.username if self.owner else '?'}"


class WorkspaceImage(models.Model):
    """A workspace image a platform admin offers (docs/workspaces.md): what it runs, on
    which port, and where its home folder is mounted. Users pick one by ``name``."""

    class Flavor(models.TextChoices):
        JUPYTER = "jupyter", "JupyterLab (Jupyter Server)"
        CODE_SERVER = "code-server", "code-server (VS Code)"

    name = models.SlugField(max_length=40, unique=True, help_text="What users ask for.")
    title = models.CharField(max_length=100)
    description = models.CharField(max_length=300, blank=True)
    flavor = models.CharField(max_length=12, choices=Flavor.choices, default=Flavor.JUPYTER)
    image = models.CharField(max_length=255, help_text="The container image, with its tag.")
    command = models.JSONField(
        default=list, blank=True, help_text='The start command, e.g. ["start-notebook.py"].'
    )
    port = models.PositiveIntegerField(default=8888)
    home_path = models.CharField(max_length=200, default="/home/jovyan")
    enabled = models.BooleanField(default=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["title", "name"]

    def __str__(self) -> str:
        return self.name
