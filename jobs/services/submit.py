"""Writes for jobs: check a spec, preview it, submit it, cancel it."""

from __future__ import annotations

import logging
from dataclasses import dataclass, replace
from typing import Any

from django.conf import settings
from django.contrib.auth.models import AnonymousUser, User
from django.db import transaction

from cluster import kube
from cluster.launchers import LAUNCHERS, launchers_offered_now
from cluster.models import Cluster
from cluster.priority_classes import PRIORITY_CLASS_VALUES
from cluster.selectors import Catalog, catalog_get
from cluster.services import on_cluster_row
from core.errors import ApplicationError, Conflict, PermissionDenied
from jobs.manifests import (
    ManifestContext,
    build_manifests,
    object_name,
    resource_defaults,
    to_yaml,
    validate_manifests,
)
from jobs.manifests.resources import cpu_and_memory
from jobs.manifests.security import check_manifests
from jobs.models import FINAL_STATES, Job, JobState, WorkspaceImage
from jobs.quota import job_demand, kind_may_borrow, quota_never_fits
from jobs.selectors.fit import FitPreview, job_fit_preview
from jobs.services.placement import Placement, clusters_for, job_place
from jobs.services.timeline import timeline_add
from jobs.services.transitions import job_stop
from jobs.services.workspace_objects import workspace_context, workspace_image_get
from jobs.spec import JobSpec
from jobs.spec_input import spec_parse
from jobs.tasks import admission_enqueue, apply_enqueue
from scheduling import cpu_millis, memory_bytes
from scheduling.quantity import human_number, human_quantity
from teams.kueue_config import team_local_queue
from teams.models import Cohort, Membership, Team
from teams.selectors import TeamQuotas, cohort_pool, membership_role, team_quotas_for_user
from teams.services import audit_record

logger = logging.getLogger(__name__)

PREVIEW_JOB_ID = 0


class ManifestInvalid(ApplicationError):
    """A generated manifest failed schema validation: a bug in the builders, never the user's."""

    status_code = 500


@dataclass(frozen=True)
class CheckedSpec:
    spec: JobSpec
    team: Team
    catalog: Catalog
    demand: dict[str, int]
    # A workspace's image (resolved from spec.workspace_image) and its owner, for its home.
    workspace_image: WorkspaceImage | None = None
    username: str = ""
    # The engine that admits it: settings.QUEUEING at submission, the job's own after; with
    # Kueue, the team's LocalQueue (looked up once, here).
    queueing: str = Job.Queueing.PORTAL
    kueue_queue: str = ""
    # Where it may run: the cluster its spec names, or those taking work for ``any``.
    clusters: tuple[Cluster, ...] = ()


def _field_error(field: str, message: str) -> ApplicationError:
    return ApplicationError(f"{field}: {message}", field_errors={field: [message]})


def _check_catalog(spec: JobSpec, catalog: Catalog) -> None:
    """Refuse GPUs this cluster does not offer, or more than any node has."""
    gpu = spec.gpu
    if gpu.product and gpu.count == 0:
        raise _field_error("gpu.product", "A GPU product needs gpu.count of 1 or more.")
    if gpu.product and gpu.product not in catalog.products:
        offered = ", ".join(sorted(catalog.products)) or "none"
        raise _field_error(
            "gpu.product",
            f"Unknown GPU product '{gpu.product}' on this cluster; choose one of: {offered}.",
        )
    if gpu.sharing == "mig" and gpu.mig_profile not in catalog.mig_profiles:
        offered = ", ".join(sorted(catalog.mig_profiles)) or "none"
        raise _field_error(
            "gpu.mig_profile",
            f"Unknown MIG profile '{gpu.mig_profile}' on this cluster; choose one of: {offered}.",
        )
    if gpu.count == 0:
        return
    spread = "more workers" if spec.kind == "training" else "more replicas"
    if gpu.sharing == "exclusive":
        if gpu.product:
            largest, what = catalog.products[gpu.product].gpus_per_node, f"{gpu.product} GPUs"
        else:
            largest, what = catalog.max_gpus_per_node, "GPUs"
        if gpu.count > largest:
            raise _field_error(
                "gpu.count",
                f"No node has {gpu.count} {what}; the largest nodes have {largest}. Ask for at "
                f"most {largest} per pod and use {spread} for more.",
            )
    elif gpu.sharing == "mig":
        largest = catalog.mig_profiles[gpu.mig_profile or ""]
        if gpu.count > largest:
            raise _field_error(
                "gpu.count",
                f"No node has {gpu.count} MIG {gpu.mig_profile} instances; at most {largest}.",
            )
    elif gpu.count > catalog.max_shared_per_node:
        raise _field_error(
            "gpu.count",
            f"No node has {gpu.count} time-sliced GPUs; at most {catalog.max_shared_per_node}.",
        )


def _check_launcher(spec: JobSpec, clusters: list[Cluster]) -> list[Cluster]:
    """A training job's launcher is one the admin enabled and the cluster serves (and, on
    Kueue, one Kueue manages: its Kubeflow v1 integration is on its way out): the clusters
    that offer it, of those it may run on."""
    if spec.kind != "training" or spec.launcher == "job":
        return clusters
    serving, offered = [], []
    for cluster in clusters:
        try:
            with on_cluster_row(cluster.pk):
                offered = launchers_offered_now()
        except kube.ClusterError as exc:
            if len(clusters) > 1:
                continue  # another may serve it
            raise _field_error(
                "launcher",
                f"The cluster could not be asked which launchers it serves ({exc.message}); "
                "try again, or use launcher job.",
            ) from exc
        if spec.launcher in offered:
            serving.append(cluster)
    if not serving:
        what = LAUNCHERS[spec.launcher].what
        raise _field_error(
            "launcher",
            f"This cluster does not offer {spec.launcher} ({what}"
            + (", which Kueue does not manage here" if settings.QUEUEING == "kueue" else "")
            + f"); use one of: {', '.join(dict.fromkeys(['job', *offered]))}.",
        )
    return serving


def _node_kind(spec: JobSpec) -> tuple[str, str]:
    """The ``Catalog.node_capacity`` key of the nodes that could run this job's pods, and
    how a person names them."""
    gpu = spec.gpu
    if gpu.count == 0:
        return "cpu-only", "node without GPUs"
    if gpu.sharing == "mig":
        return f"mig:{gpu.mig_profile}", f"node with MIG {gpu.mig_profile}"
    if gpu.sharing == "shared":
        return "shared", "node with time-sliced GPUs"
    if gpu.product:
        return f"product:{gpu.product}", f"{gpu.product} node"
    return "gpu", "GPU node"


def _check_node_capacity(
    spec: JobSpec, catalog: Catalog, *, cpu_millis: int, memory_bytes: int
) -> None:
    """Refuse a pod's cpu or memory that no node of the kind that could run it offers (as
    the last catalog refresh saw the nodes; before one, nothing is refused here)."""
    kind, nodes = _node_kind(spec)
    most = catalog.node_capacity.get(kind)
    if not most:
        return
    spread = "more workers" if spec.kind == "training" else "more replicas"
    for resource, asked in (("cpu", cpu_millis), ("memory", memory_bytes)):
        if asked > most.get(resource, 0):
            largest = human_number(most.get(resource, 0), resource, down=True)
            raise _field_error(
                resource,
                f"No node can run a pod with {human_quantity(asked, resource)}: the largest "
                f"{nodes} has {largest}. Ask for at most {largest} per pod, and use {spread} "
                "for more.",
            )


def manifest_context(
    checked: CheckedSpec, *, job_id: int, attempt: int = 0, excluded_nodes: tuple[str, ...] = ()
) -> ManifestContext:
    """Everything the builders need besides the spec: one per submission (and per run)."""
    image = checked.workspace_image
    return ManifestContext(
        job_id=job_id,
        namespace=checked.team.namespace,
        shared_gpu_resource=checked.catalog.shared_gpu_resource,
        kubernetes_version=settings.KUBERNETES_VERSION,
        attempt=attempt,
        excluded_nodes=excluded_nodes,
        node_failure_toleration_seconds=(
            settings.NODE_FAILURE_TOLERATION_SECONDS
            if settings.NODE_FAILURE_TOLERATION_SECONDS >= 0
            else None
        ),
        kueue_queue=checked.kueue_queue,
        training_runtime=settings.TRAINJOB_RUNTIME,
        workspace=(
            workspace_context(image=image, username=checked.username, job_id=job_id)
            if image is not None
            else None
        ),
    )


def _kueue_queue(team: Team, queueing: str) -> str:
    """The team's LocalQueue when Kueue admits its jobs; refused when it has none yet."""
    if queueing != Job.Queueing.KUEUE:
        return ""
    queue = team_local_queue(team)
    if not queue:
        raise _field_error(
            "team",
            f"Team {team.slug} has no Kueue LocalQueue yet; ask an admin to set the "
            "team's LocalQueue in the admin (Kueue is run by the platform team here).",
        )
    return queue


def job_spec_check(*, user: User | AnonymousUser, data: Any) -> CheckedSpec:
    """Everything that decides whether a spec may be submitted, in order:

    1. shape, types, sizes and characters (``spec_parse``);
    2. the team is one of the user's;
    3. the GPU catalog offers what is asked, and some node could hold one pod's GPUs, cpu
       and memory;
    4. the team's quotas could ever admit it.
    """
    spec = spec_parse(data)
    found = team_quotas_for_user(user=user, slug=spec.team)
    if found is None:
        raise _field_error(
            "team", f"You are not a member of a team '{spec.team}'; use one of your teams."
        )
    team = found.team
    clusters = _check_launcher(spec, clusters_for(spec.cluster))
    image = None
    if spec.kind == "workspace":
        image = workspace_image_get(name=spec.workspace_image or "")
        spec = replace(spec, image=image.image)
        _check_home_path(spec, image)
    catalog = catalog_get()
    _check_catalog(spec, catalog)
    requests = cpu_and_memory(spec)
    pod_cpu, pod_memory = cpu_millis(requests["cpu"]), memory_bytes(requests["memory"])
    _check_node_capacity(spec, catalog, cpu_millis=pod_cpu, memory_bytes=pod_memory)
    demand = job_demand(spec, cpu_millis=pod_cpu, memory_bytes=pod_memory)
    clusters = _check_quotas(spec, demand, found, clusters)
    return CheckedSpec(
        spec=spec,
        team=team,
        catalog=catalog,
        demand=demand,
        workspace_image=image,
        username=user.get_username(),
        queueing=settings.QUEUEING,
        kueue_queue=_kueue_queue(team, settings.QUEUEING),
        clusters=tuple(clusters),
    )


def _check_quotas(
    spec: JobSpec, demand: dict[str, int], found: TeamQuotas, clusters: list[Cluster]
) -> list[Cluster]:
    """The clusters where the team's quotas could ever admit the job (a team's quota is per
    cluster); refused, naming the field, when there is none."""
    team = found.team
    cohort = None
    if team.cohort_id is not None and kind_may_borrow(team, spec.kind):
        cohort = Cohort.objects.filter(pk=team.cohort_id).values_list("slug", flat=True).first()
    fitting, problems = [], []
    for cluster in clusters:
        quotas = found.on(cluster)
        ceilings = None
        if cohort is not None and team.cohort_id is not None:
            ceilings = quotas.ceilings(cohort_pool(cohort_id=team.cohort_id, cluster=cluster))
        problem = quota_never_fits(
            spec, demand, quotas.limits, team=team.slug, ceilings=ceilings, cohort=cohort
        )
        if problem is None:
            fitting.append(cluster)
        else:
            problems.append(problem)
    if fitting:
        return fitting
    problem = problems[0]
    field = "gpu.count" if problem.resource not in ("cpu", "memory") else problem.resource
    message = problem.message
    if len(clusters) > 1 or not clusters[0].is_first:
        # Where it was asked: the first cluster alone is every installation before several.
        message = f"On {', '.join(c.name for c in clusters)}: {message}"
    raise _field_error(field, message)


def _check_home_path(spec: JobSpec, image: WorkspaceImage) -> None:
    for index, volume in enumerate(spec.volumes):
        if volume.mount_path.rstrip("/") == image.home_path.rstrip("/"):
            raise _field_error(
                f"volumes[{index}].mount_path",
                f"The home folder is mounted at {image.home_path}; mount this volume "
                "elsewhere, e.g. /data.",
            )


def _manifests_for(checked: CheckedSpec, ctx: ManifestContext) -> list[dict[str, Any]]:
    manifests = build_manifests(checked.spec, ctx)
    violations = check_manifests(
        manifests,
        namespace=checked.team.namespace,
        allowed_registries=checked.catalog.allowed_registries,
    )
    if violations:
        # The only rule user input can break is the registry allow-list; the rest would be
        # a builder bug, refused all the same (defence in depth).
        field = "image" if all(v.rule == "image-registry" for v in violations) else "spec"
        raise ApplicationError(
            f"{field}: the security check refused the manifest: "
            + "; ".join(str(v) for v in violations[:3]),
            field_errors={field: [v.message if field == "image" else str(v) for v in violations]},
        )
    errors = validate_manifests(manifests, settings.KUBERNETES_VERSION)
    if errors:
        logger.error("generated manifests failed schema validation: %s", errors)
        raise ManifestInvalid(
            "The portal generated an invalid manifest (a bug; nothing was stored): "
            + "; ".join(errors[:3])
        )
    return manifests


@dataclass(frozen=True)
class Preview:
    spec: JobSpec
    manifests: list[dict[str, Any]]
    yaml: str
    defaults: dict[str, dict[str, str]]
    demand: dict[str, int]
    fit: FitPreview | None


def job_preview(*, user: User | AnonymousUser, data: Any, with_fit: bool = True) -> Preview:
    """The manifests a spec would produce, validated, and whether it would start now
    (``with_fit``: asks the cluster). Nothing is stored."""
    checked = job_spec_check(user=user, data=data)
    manifests = _manifests_for(checked, manifest_context(checked, job_id=PREVIEW_JOB_ID))
    fit = _place(checked, manifests).fit if with_fit else None
    return Preview(
        spec=checked.spec,
        manifests=manifests,
        yaml=to_yaml(manifests),
        defaults=resource_defaults(checked.spec),
        demand=checked.demand,
        fit=fit,
    )


def _place(checked: CheckedSpec, manifests: list[dict[str, Any]], *, ask: bool = True) -> Placement:
    """Where the job would run (``jobs.services.placement``), with that cluster's fit
    preview when ``ask`` (the cluster is asked even when it is the only one)."""

    def preview(cluster: Cluster) -> FitPreview:
        return job_fit_preview(
            cluster=cluster,
            manifests=manifests,
            team=checked.team,
            demand=checked.demand,
            kind=checked.spec.kind,
            priority=PRIORITY_CLASS_VALUES[checked.spec.priority],
        )

    placement = job_place(list(checked.clusters), preview)
    if ask and placement.fit is None:
        with on_cluster_row(placement.cluster.pk):
            placement = replace(placement, fit=preview(placement.cluster))
    return placement


@transaction.atomic
def job_submit(*, user: User, data: Any, cloned_from: Job | None = None) -> Job:
    """Store a checked spec as a ``queued`` job with its manifests, its event and its
    audit entry, in one transaction.

    1. Check the spec (``job_spec_check``): a refused request stores nothing.
    2. Insert the job: its id names the Kubernetes objects.
    3. Build and validate the manifests with that id and store them; a manifest refused
       here rolls the whole submission back.
    4. Queue admission on commit, so a worker never sees a job that does not exist yet;
       with Kueue, queue its apply instead: it waits in Kueue's queue, in the cluster.
    """
    checked = job_spec_check(user=user, data=data)
    spec, team = checked.spec, checked.team
    job = Job.objects.create(
        team=team,
        owner=user,
        name=spec.name,
        kind=spec.kind,
        priority=spec.priority,
        priority_value=PRIORITY_CLASS_VALUES[spec.priority],
        state=JobState.QUEUED,
        queueing=checked.queueing,
        reason="Submitted",
        message="Waiting for admission against the team's quota.",
        spec=spec.to_dict(),
        demand=checked.demand,
        gpu_count=spec.gpu.count * spec.pod_count,
        namespace=team.namespace,
        cloned_from=cloned_from,
    )
    ctx = manifest_context(checked, job_id=job.pk)
    job.manifests = _manifests_for(checked, ctx)
    job.object_name = object_name(spec, ctx)
    placement = _place(checked, job.manifests, ask=len(checked.clusters) > 1)
    job.cluster = placement.cluster
    job.save(update_fields=["manifests", "object_name", "cluster"])
    timeline_add(job_id=job.pk, reason="Submitted", message=f"Submitted by {user.get_username()}.")
    if placement.reason:
        timeline_add(job_id=job.pk, reason="Placed", message=placement.reason)
    audit_record(
        actor=user, action="job.submit", target=job, changes={"team": team.slug, "name": job.name}
    )
    if job.queueing == Job.Queueing.KUEUE:
        apply_enqueue(job_id=job.pk)  # Kueue admits it, in the cluster
    else:
        admission_enqueue(team_id=team.pk)
    return job


def job_can_cancel(*, user: User | AnonymousUser, job: Job) -> bool:
    """Members cancel their own jobs; leads (and platform admins) any job of the team."""
    if not user.is_authenticated:
        return False
    if job.owner_id == user.pk:
        return True
    return membership_role(user=user, team=job.team) == Membership.Role.LEAD


@transaction.atomic
def job_cancel(*, user: User, job_id: int) -> Job:
    """Cancel a job that has not finished. A queued job never reaches the cluster. Only the
    job's row is locked (its team is read, not locked): admission locks the team, then its
    jobs, and a cancel that locked both in one statement deadlocked with it."""
    job = Job.objects.select_for_update(of=("self",)).select_related("team").get(pk=job_id)
    if not job_can_cancel(user=user, job=job):
        raise PermissionDenied(
            f"Only the job's owner or a lead of team {job.team.slug} can cancel it."
        )
    if job.state in FINAL_STATES:
        raise Conflict(f"The job has already {job.state}; there is nothing to cancel.")
    job_stop(
        job=job,
        reason="Cancelled",
        message=f"Cancelled by {user.get_username()}.",
        actor=user,
        audit_action="job.cancel",
    )
    job.refresh_from_db()
    return job


def job_manifests_rebuild(
    *, job: Job, attempt: int, excluded_nodes: tuple[str, ...]
) -> list[dict[str, Any]]:
    """A job's manifests for another run: the same spec, with ``RESTART_ATTEMPT`` and the
    nodes it must avoid (security-checked as at submission)."""
    spec = JobSpec.from_dict(job.spec)
    checked = CheckedSpec(
        spec=spec,
        team=job.team,
        catalog=catalog_get(),
        demand=job.demand,
        queueing=job.queueing,
        kueue_queue=_kueue_queue(job.team, job.queueing),
    )
    ctx = manifest_context(checked, job_id=job.pk, attempt=attempt, excluded_nodes=excluded_nodes)
    return _manifests_for(checked, ctx)
