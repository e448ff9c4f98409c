"""GPU-hour accounting: each job's use per day, rolled up from the portal's job rows
(allocated) and Prometheus (used, idle), and what a GPU-hour of each product costs.

Raw metrics stay in Prometheus; these tables keep what reports over months need, so a
report never re-reads months of raw series.
"""

from __future__ import annotations

from django.conf import settings
from django.core.validators import MinValueValidator
from django.db import models

from jobs.models import Job
from teams.models import Team


class GpuPrice(models.Model):
    """What one GPU-hour of an accounting product costs, from a day on (a new row for a new
    price keeps the old days' cost as it was)."""

    product = models.CharField(
        max_length=120,
        help_text=(
            "The accounting product, as the reports name it: a GPU product label value "
            "(NVIDIA-A100-SXM4-80GB), a MIG profile (mig-1g.10gb) or a time-sliced GPU "
            "(shared:NVIDIA-T4)."
        ),
    )
    price_per_gpu_hour = models.DecimalField(
        max_digits=10,
        decimal_places=4,
        validators=[MinValueValidator(0)],
        help_text="Per GPU-hour (per slice-hour for a MIG profile), in ACCOUNTING_CURRENCY.",
    )
    effective_from = models.DateField(help_text="The first day this price applies to.")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["product", "-effective_from"]
        verbose_name = "GPU price"
        constraints = [
            models.UniqueConstraint(
                fields=["product", "effective_from"], name="gpuprice_unique_product_day"
            )
        ]

    def __str__(self) -> str:
        return f"{self.product} from {self.effective_from}: {self.price_per_gpu_hour}"


class GpuUsageDay(models.Model):
    """One job's GPU use on one day (the portal's ``TIME_ZONE``).

    Allocated: GPUs (or slices) held × the time the job held them that day, from the job
    row. Used: the DCGM utilisation of the devices its pods held, integrated over the day
    (MIG: graphics engine activity; time-sliced: the whole GPU's, as DCGM reports it per
    pod). Idle: held GPU-hours under the team's idle threshold. Used and idle are None when
    Prometheus had nothing for the job (down, or an exporter gap): unknown, not zero.
    """

    day = models.DateField()
    # Kept when a job row is deleted: the hours were used and stay in the reports.
    job = models.ForeignKey(Job, null=True, on_delete=models.SET_NULL, related_name="usage_days")
    job_name = models.CharField(max_length=63, help_text="The job's object name.")
    team = models.ForeignKey(Team, on_delete=models.PROTECT, related_name="usage_days")
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="usage_days"
    )
    product = models.CharField(max_length=120)
    gpu_hours_allocated = models.FloatField()
    gpu_hours_used = models.FloatField(null=True)
    idle_gpu_hours = models.FloatField(null=True)
    cost = models.DecimalField(max_digits=14, decimal_places=4, null=True)  # None: no price
    rolled_up_at = models.DateTimeField()

    class Meta:
        ordering = ["day", "team_id", "job_id"]
        verbose_name = "GPU usage day"
        constraints = [
            models.UniqueConstraint(fields=["day", "job"], name="gpuusageday_unique_job_day")
        ]
        indexes = [
            models.Index(fields=["day", "team"], name="gpuusageday_day_team"),
            models.Index(fields=["user", "day"], name="gpuusageday_user_day"),
        ]

    def __str__(self) -> str:
        return f"{self.day} {self.job_name}: {self.gpu_hours_allocated:.2f} GPU-h"


class RollupDay(models.Model):
    """What the rollup last did for one day: a day is ``complete`` once rolled up after it
    ended with Prometheus answering; until then the periodic task does it again."""

    day = models.DateField(unique=True)
    complete = models.BooleanField(default=False)
    measured = models.BooleanField(
        default=False, help_text="Prometheus answered (used and idle GPU-hours are known)."
    )
    jobs = models.PositiveIntegerField(default=0)
    error = models.TextField(blank=True)
    rolled_up_at = models.DateTimeField()
    seconds = models.FloatField(default=0.0, help_text="How long the rollup took.")

    class Meta:
        ordering = ["-day"]
        verbose_name = "rolled-up day"

    def __str__(self) -> str:
        return f"{self.day} ({'complete' if self.complete else 'partial'})"


class NodeFailure(models.Model):
    """A GPU failure that failed a job (an XID on a GPU its pod held): the node's failure
    history, shown on the cluster page and in the admin, and what cordoning counts."""

    node = models.CharField(max_length=253, db_index=True)
    gpu = models.CharField(max_length=16)
    xid = models.PositiveIntegerField()
    job = models.ForeignKey(Job, null=True, on_delete=models.SET_NULL, related_name="+")
    pod = models.CharField(max_length=253, blank=True)
    at = models.DateTimeField(db_index=True)

    class Meta:
        ordering = ["-at", "-id"]
        verbose_name = "GPU failure"

    def __str__(self) -> str:
        return f"{self.node} GPU {self.gpu}: XID {self.xid} at {self.at:%Y-%m-%d %H:%M}"
