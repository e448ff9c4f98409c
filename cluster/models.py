"""The GPU catalog: what the cluster offers, discovered from its nodes and kept by admins."""

from __future__ import annotations

from django.conf import settings
from django.core.validators import RegexValidator
from django.db import models

from cluster.access import ClusterAccess
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


class Cluster(models.Model):
    """A Kubernetes cluster the portal places work on, and how to reach it.

    The first one (``CLUSTER_NAME``, "default" unless set) is made by a migration from the
    portal's own settings (``KUBECONFIG``, ``KUBE_CONTEXT``, ``KUBE_IN_CLUSTER``,
    ``PROMETHEUS_URL``): an installation that had one cluster keeps it, unchanged. Others
    are added by admins: a kubeconfig the portal reads (a Secret mounted as a file), or the
    cluster the portal runs in."""

    class Access(models.TextChoices):
        SETTINGS = "settings", "The portal's settings (KUBECONFIG, KUBE_CONTEXT, KUBE_IN_CLUSTER)"
        KUBECONFIG = "kubeconfig", "A kubeconfig file (e.g. a Secret mounted into the portal)"
        IN_CLUSTER = "in_cluster", "The cluster the portal runs in (its service account)"

    class State(models.TextChoices):
        ENABLED = "enabled", "Enabled"
        DRAINING = "draining", "Draining: runs what it has, takes no new work"
        DISABLED = "disabled", "Disabled: not tracked, takes no new work"

    name = models.CharField(
        max_length=40,
        unique=True,
        validators=[
            RegexValidator(
                r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$",
                "Lower-case letters, digits and '-', starting and ending with a letter or "
                "digit (e.g. a100-west).",
            )
        ],
        help_text="How people and the API name it (e.g. a100-west).",
    )
    access = models.CharField(max_length=12, choices=Access.choices, default=Access.KUBECONFIG)
    kubeconfig_path = models.CharField(
        max_length=500,
        blank=True,
        help_text="With a kubeconfig file: its path on the portal's and workers' machines.",
    )
    kube_context = models.CharField(
        max_length=200, blank=True, help_text="The kubeconfig's context; empty: its current one."
    )
    prometheus_url = models.URLField(
        blank=True, help_text="Its Prometheus; empty: the portal's PROMETHEUS_URL."
    )
    prometheus_cluster_label = models.CharField(
        max_length=63,
        blank=True,
        help_text="On a Prometheus shared by several clusters: the value of its series' "
        "'cluster' label for this one.",
    )
    region = models.CharField(max_length=63, blank=True)
    gpu_hour_cost = models.DecimalField(
        max_digits=8,
        decimal_places=4,
        null=True,
        blank=True,
        help_text="Cost of a GPU-hour here, where it differs from the GPU product's.",
    )
    state = models.CharField(max_length=10, choices=State.choices, default=State.ENABLED)
    # Written by its tracker: since when it has not answered, and what it said last.
    unreachable_since = models.DateTimeField(null=True, blank=True, editable=False)
    last_error = models.TextField(blank=True, editable=False)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["name"]
        constraints = [
            models.CheckConstraint(
                condition=~models.Q(access="kubeconfig") | ~models.Q(kubeconfig_path=""),
                name="cluster_kubeconfig_has_a_path",
                violation_error_message="A cluster reached by kubeconfig needs its path.",
            )
        ]

    def __str__(self) -> str:
        return self.name

    @classmethod
    def first(cls) -> Cluster:
        """The portal's first cluster, the one its settings reach (``CLUSTER_NAME``): made by
        a migration, and made again from the settings should it be gone (a flushed
        database)."""
        found, _ = cls.objects.get_or_create(
            name=settings.CLUSTER_NAME, defaults={"access": cls.Access.SETTINGS}
        )
        return found

    @property
    def is_first(self) -> bool:
        """The portal's first cluster: it also holds the rows from before several clusters
        (jobs and quotas whose cluster is empty)."""
        return self.name == settings.CLUSTER_NAME

    @property
    def takes_new_work(self) -> bool:
        return self.state == self.State.ENABLED

    def access_to(self) -> ClusterAccess:
        """How the Kubernetes adapter reaches it (``with kube.on_cluster(...)``)."""
        return ClusterAccess(
            name=self.name,
            access=self.access,
            kubeconfig=self.kubeconfig_path,
            context=self.kube_context,
        )
