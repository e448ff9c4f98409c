"""Kueue's configuration written from the portal's teams, cohorts and quotas (Kueue mode,
managed): pure builders, and the sync that keeps the cluster's copy in line.

The mapping, quota row by quota row:

- ``cpu`` (cores), ``memory`` (GiB), each MIG resource and ``nvidia.com/gpu.shared``: one
  resource group with the flavor ``gpu-portal-default`` (no node labels: the resource
  itself finds its nodes). A team without a ``cpu`` or ``memory`` row is not limited on it
  (``UNLIMITED``); without a row for a MIG profile or shared GPUs it may not use them (0),
  as the portal's own admission decides.
- ``nvidia.com/gpu``: one resource group. Its flavors: first one per GPU product the team
  has a quota row for (``gpu-<product>``: the GFD product label, the GPU taint's
  toleration), then ``gpu-portal-any-gpu`` (no node label) with the team's any-GPU quota.
  Kueue counts quota per flavor, so the any-GPU quota sits in one flavor: a total across
  products, as the portal counts it (one flavor per product with the whole quota each would
  let a team hold it once per product). The job's own GPU-product affinity picks the
  nodes. A job for a product with its own row uses that row first and may go on in the
  any-GPU flavor, where the portal's engine would stop at the product's row.
- Borrowing and lending limits as the rows set them (none without a cohort: Kueue refuses
  them there); the cohort's slug as ``cohortName``; the team's weight for fair sharing.
- Preemption as the portal's own: ``reclaimWithinCohort: Any`` (a lender takes its quota
  back from any job of a team over its nominal quota, lowest priority first),
  ``withinClusterQueue: LowerPriority``; ``StrictFIFO``, as the portal's queue (the first
  job that does not fit holds the ones behind it, so large jobs are not starved).
- One LocalQueue, ``gpu-portal``, in each team's namespace.

Every object carries the portal's ``managed-by`` label; the sync removes those of its
objects nothing calls for any more, and never touches the others.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable
from decimal import Decimal
from typing import Any

import redis
from django.conf import settings

from cluster import kube
from cluster.compare import contains
from cluster.labels import MANAGED_BY_LABEL, MANAGED_BY_SELECTOR, MANAGED_BY_VALUE, TEAM_LABEL
from cluster.models import Cluster
from cluster.selectors import Catalog, catalog_get
from cluster.services import cluster_current
from core.redis_client import redis_client
from scheduling.quantity import quota_from_quantity, quota_quantity
from scheduling.resources import ANY_GPU, CPU, GPU_PRODUCT_LABEL, MEMORY, MIG_PREFIX, SHARED_GPU
from teams.models import Cohort, GpuQuota, Team
from teams.selectors import quotas_on_cluster, teams_on_cluster
from teams.services import cohort_save, quota_delete, quota_set, team_save

logger = logging.getLogger(__name__)
SYNC_LOCK = "gpu-portal:kueue-sync"
SYNC_LOCK_SECONDS = 120  # past the sync task's hard time limit (90 s)
SYNC_LOCK_WAIT_SECONDS = 60

API_VERSION = "kueue.x-k8s.io/v1beta2"
DEFAULT_FLAVOR = "gpu-portal-default"
ANY_GPU_FLAVOR = "gpu-portal-any-gpu"
LOCAL_QUEUE = "gpu-portal"
UNLIMITED = 1_000_000  # cores or GiB: a resource a team has no quota row for
GPU_TOLERATION = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
Obj = dict[str, Any]


def _labels(team: Team | None = None) -> dict[str, str]:
    labels = {MANAGED_BY_LABEL: MANAGED_BY_VALUE}
    if team is not None:
        labels[TEAM_LABEL] = team.slug
    return labels


def team_local_queue(team: Team) -> str:
    """The LocalQueue a team's jobs go to in Kueue mode: the portal's own when it manages
    Kueue's configuration, else the one an admin mapped the team to ("" when none yet)."""
    return LOCAL_QUEUE if settings.KUEUE_MANAGED else team.kueue_local_queue


def flavor_name(product: str) -> str:
    """``NVIDIA-A100-SXM4-80GB`` → ``gpu-nvidia-a100-sxm4-80gb`` (a DNS subdomain)."""
    return "gpu-" + re.sub(r"[^a-z0-9]+", "-", product.lower()).strip("-")


def resource_flavors(catalog: Catalog) -> list[Obj]:
    """The default flavor, the any-GPU flavor, and one per GPU product of the catalog."""
    flavors: list[Obj] = [
        {
            "apiVersion": API_VERSION,
            "kind": "ResourceFlavor",
            "metadata": {"name": DEFAULT_FLAVOR, "labels": _labels()},
            "spec": {},
        },
        {
            "apiVersion": API_VERSION,
            "kind": "ResourceFlavor",
            "metadata": {"name": ANY_GPU_FLAVOR, "labels": _labels()},
            "spec": {"tolerations": [dict(GPU_TOLERATION)]},
        },
    ]
    for product in sorted(catalog.products):
        flavors.append(
            {
                "apiVersion": API_VERSION,
                "kind": "ResourceFlavor",
                "metadata": {"name": flavor_name(product), "labels": _labels()},
                "spec": {
                    "nodeLabels": {GPU_PRODUCT_LABEL: product},
                    "tolerations": [dict(GPU_TOLERATION)],
                },
            }
        )
    return flavors


def _resource(resource: str, row: GpuQuota | None, default: int, cohort: bool) -> Obj:
    entry: Obj = {
        "name": resource,
        "nominalQuota": quota_quantity(resource, row.limit if row else default),
    }
    if row is not None and cohort:
        if row.borrowing_limit is not None:
            entry["borrowingLimit"] = quota_quantity(resource, row.borrowing_limit)
        if row.lending_limit is not None:
            entry["lendingLimit"] = quota_quantity(resource, row.lending_limit)
    return entry


def cluster_queue(team: Team, quotas: Iterable[GpuQuota], catalog: Catalog) -> Obj:
    """The team's ClusterQueue (named after its slug)."""
    rows = {q.resource: q for q in quotas}
    cohort = team.cohort.slug if team.cohort is not None else None
    in_cohort = cohort is not None
    other = [CPU, MEMORY, *(f"{MIG_PREFIX}{p}" for p in sorted(catalog.mig_profiles))]
    if catalog.shared_gpu_resource == SHARED_GPU:
        other.append(SHARED_GPU)
    groups: list[Obj] = [
        {
            "coveredResources": other,
            "flavors": [
                {
                    "name": DEFAULT_FLAVOR,
                    "resources": [
                        _resource(r, rows.get(r), UNLIMITED if r in (CPU, MEMORY) else 0, in_cohort)
                        for r in other
                    ],
                }
            ],
        }
    ]
    # A product's own quota first (its flavor's node label keeps it on that product), then
    # the any-GPU quota in one flavor without node labels: counted once, whatever the product.
    products = [p for p in sorted(catalog.products) if p in rows]
    groups.append(
        {
            "coveredResources": [ANY_GPU],
            "flavors": [
                *(
                    {
                        "name": flavor_name(p),
                        "resources": [_resource(ANY_GPU, rows[p], 0, in_cohort)],
                    }
                    for p in products
                ),
                {
                    "name": ANY_GPU_FLAVOR,
                    "resources": [_resource(ANY_GPU, rows.get(ANY_GPU), 0, in_cohort)],
                },
            ],
        }
    )
    spec: Obj = {
        "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": team.namespace}},
        "queueingStrategy": "StrictFIFO",
        "preemption": {"reclaimWithinCohort": "Any", "withinClusterQueue": "LowerPriority"},
        "resourceGroups": groups,
    }
    if cohort is not None:
        spec["cohortName"] = cohort
        spec["fairSharing"] = {"weight": str(Decimal(team.weight).normalize())}
    return {
        "apiVersion": API_VERSION,
        "kind": "ClusterQueue",
        "metadata": {"name": team.slug, "labels": _labels(team)},
        "spec": spec,
    }


def local_queue(team: Team) -> Obj:
    """The team's LocalQueue, in its namespace, for its ClusterQueue."""
    return {
        "apiVersion": API_VERSION,
        "kind": "LocalQueue",
        "metadata": {"name": LOCAL_QUEUE, "namespace": team.namespace, "labels": _labels(team)},
        "spec": {"clusterQueue": team.slug},
    }


# Quantities the API server writes back in its canonical form ("1000000" is read as "1M").
_QUANTITIES = frozenset({"nominalQuota", "borrowingLimit", "lendingLimit"})


# Fields the portal writes only sometimes: a queue in no cohort has neither cohort nor fair
# share, a quota row without limits no limits.
_OPTIONAL_SPEC = ("cohortName", "fairSharing")
_OPTIONAL_RESOURCE = ("borrowingLimit", "lendingLimit")


def _same_spec(existing: Obj, wanted: Obj) -> bool:
    """Whether ``existing`` already says what ``wanted`` does. Fields the API server or Kueue
    added (their defaults) do not count; the optional fields the portal writes do, present or
    absent: ``contains`` alone took a ClusterQueue still naming the cohort its team had left
    for the same, and Kueue went on lending that team the cohort's quota."""
    have, want = existing.get("spec") or {}, wanted.get("spec") or {}
    return (
        contains(have, want, _QUANTITIES)
        and contains(existing["metadata"].get("labels") or {}, wanted["metadata"]["labels"])
        and (wanted["kind"] != "ClusterQueue" or _same_optional_fields(have, want))
    )


def _same_optional_fields(have: Obj, want: Obj) -> bool:
    if any((key in have) != (key in want) for key in _OPTIONAL_SPEC):
        return False
    resources = zip(_queue_resources(have), _queue_resources(want), strict=False)
    return all(
        (key in had) == (key in wanted) for had, wanted in resources for key in _OPTIONAL_RESOURCE
    )


def _queue_resources(spec: Obj) -> list[Obj]:
    return [
        resource
        for group in spec.get("resourceGroups") or []
        for flavor in group.get("flavors") or []
        for resource in flavor.get("resources") or []
    ]


def kueue_config_sync(
    *, teams: Iterable[Team], catalog: Catalog, cluster: Cluster | None = None
) -> dict[str, str]:
    """Write the flavors, the ClusterQueue and LocalQueue of every team with quota on the
    cluster (the first with ``None``; the Kubernetes adapter bound to it), from its quotas
    there, and remove the portal's Kueue objects no team calls for any more. Returns
    ``{"<Kind>/<name>": outcome}``.

    1. Ensure the wanted objects (create, or replace when their spec differs).
    2. List the portal's LocalQueues, ClusterQueues and flavors (by the managed-by label)
       and delete those not wanted, queues before the flavors they use.
    Raises ``kube.ClusterError``.
    """
    wanted: list[Obj] = resource_flavors(catalog)
    cluster = cluster or cluster_current()
    for team in teams:
        quotas = quotas_on_cluster(team=team, cluster=cluster)
        wanted += [cluster_queue(team, quotas, catalog), local_queue(team)]
    results: dict[str, str] = {}
    for manifest in wanted:
        meta = manifest["metadata"]
        where = f"{meta['namespace']}/" if "namespace" in meta else ""
        results[f"{manifest['kind']}/{where}{meta['name']}"] = kube.ensure(
            manifest, compare=_same_spec
        )
    keep = {(m["kind"], m["metadata"].get("namespace"), m["metadata"]["name"]) for m in wanted}
    for kind in ("LocalQueue", "ClusterQueue", "ResourceFlavor"):
        for obj in kube.list_all(kind, label_selector=MANAGED_BY_SELECTOR):
            meta = obj["metadata"]
            if (kind, meta.get("namespace"), meta["name"]) not in keep:
                kube.delete(kind, meta["name"], meta.get("namespace"))
                where = f"{meta['namespace']}/" if meta.get("namespace") else ""
                results[f"{kind}/{where}{meta['name']}"] = "deleted"
    return results


def kueue_managed_sync(cluster: Cluster | None = None) -> dict[str, str]:
    """Kueue's configuration in the cluster (the first with ``None``) from its teams when
    the portal manages it (``QUEUEING=kueue`` and ``KUEUE_MANAGED``); nothing otherwise
    (docs/queueing.md)."""
    if settings.QUEUEING != "kueue" or not settings.KUEUE_MANAGED:
        return {}
    # One writer at a time, reading the teams once it holds the lock. Two syncs that both
    # read before either wrote (an admin's change and beat's pass, in two workers) left
    # Kueue with the older read until the next pass: a team taken out of its cohort still
    # borrowed from it.
    lock = redis_client().lock(
        SYNC_LOCK, timeout=SYNC_LOCK_SECONDS, blocking_timeout=SYNC_LOCK_WAIT_SECONDS
    )
    if not lock.acquire():
        raise kube.TemporaryClusterError(
            f"another Kueue configuration sync has held its lock for over "
            f"{SYNC_LOCK_WAIT_SECONDS} s; this one is retried"
        )
    try:
        cluster = cluster or cluster_current()
        teams = teams_on_cluster(cluster=cluster).select_related("cohort").order_by("slug")
        outcome = kueue_config_sync(teams=teams, catalog=catalog_get(), cluster=cluster)
    finally:
        try:
            lock.release()
        except redis.exceptions.LockError:
            logger.warning("Kueue sync lock expired before release (the sync took too long)")
    changed = {k: v for k, v in outcome.items() if v != "unchanged"}
    if changed:
        # Logged as the team mirror's changes are: what the portal did to Kueue's objects.
        logger.info("Kueue configuration: %s", changed)
    return outcome


# --- Kueue run by the platform team (KUEUE_MANAGED=false) ------------------------------------


def quotas_from_cluster_queue(queue: Obj, flavors: dict[str, Obj]) -> dict[str, GpuQuota]:
    """The portal's quota rows a ClusterQueue amounts to (unsaved; limits summed over its
    flavors): ``nvidia.com/gpu`` in a flavor whose node labels name a GPU product is that
    product's row, in any other flavor the any-GPU row; every other resource its own row.
    A limit is kept only where every flavor of the resource sets it."""
    totals: dict[str, dict[str, list[int | None]]] = {}
    for group in (queue.get("spec") or {}).get("resourceGroups") or []:
        for flavor in group.get("flavors") or []:
            labels = ((flavors.get(flavor.get("name", "")) or {}).get("spec") or {}).get(
                "nodeLabels"
            ) or {}
            for res in flavor.get("resources") or []:
                name = str(res["name"])
                row = labels.get(GPU_PRODUCT_LABEL, ANY_GPU) if name == ANY_GPU else name
                entry = totals.setdefault(row, {"nominal": [], "borrowing": [], "lending": []})
                for key, field_name in (
                    ("nominal", "nominalQuota"),
                    ("borrowing", "borrowingLimit"),
                    ("lending", "lendingLimit"),
                ):
                    given = res.get(field_name)
                    entry[key].append(None if given is None else quota_from_quantity(name, given))
    rows = {}
    for resource, entry in totals.items():
        nominal = sum(v or 0 for v in entry["nominal"])
        limits = [
            None if any(v is None for v in entry[k]) else sum(v or 0 for v in entry[k])
            for k in ("borrowing", "lending")
        ]
        # Kueue's unlimited stand-in for cpu and memory is no row in the portal.
        if resource in (CPU, MEMORY) and nominal >= UNLIMITED:
            continue
        rows[resource] = GpuQuota(
            resource=resource,
            limit=nominal,
            borrowing_limit=limits[0],
            lending_limit=None if limits[1] is None else min(limits[1], nominal),
        )
    return rows


def kueue_external_read() -> dict[str, str]:
    """Kueue run by the platform team: each mapped team's quotas, cohort and weight read
    from its LocalQueue's ClusterQueue into the portal's rows (audited as any quota
    change), so every page, the preview and the submission checks show what Kueue
    enforces. Writes nothing to the cluster. Returns ``{"<team>": outcome}``.
    Raises ``kube.ClusterError``."""
    if settings.QUEUEING != "kueue" or settings.KUEUE_MANAGED:
        return {}
    flavors = {f["metadata"]["name"]: f for f in kube.list_all("ResourceFlavor")}
    outcome: dict[str, str] = {}
    for team in Team.objects.exclude(kueue_local_queue="").select_related("cohort"):
        try:
            local = kube.get("LocalQueue", team.kueue_local_queue, team.namespace)
            name = str((local.get("spec") or {}).get("clusterQueue") or "")
            queue = kube.get("ClusterQueue", name)
        except kube.ObjectNotFound as exc:
            # Kept as they are: the platform team may be recreating its queues.
            logger.warning("team %s: Kueue queues not found: %s", team.slug, exc)
            outcome[team.slug] = f"not found: {exc.message}"
            continue
        spec = queue.get("spec") or {}
        cohort_name = str(spec.get("cohortName") or "")
        cohort = None
        if cohort_name:
            cohort = Cohort.objects.filter(slug=cohort_name).first() or cohort_save(
                actor=None, cohort=Cohort(slug=cohort_name, name=cohort_name)
            )
        weight = Decimal(str((spec.get("fairSharing") or {}).get("weight", 1)))
        if team.cohort_id != (cohort.pk if cohort else None) or team.weight != weight:
            team.cohort, team.weight = cohort, weight
            team_save(actor=None, team=team)
        wanted = quotas_from_cluster_queue(queue, flavors)
        have = {q.resource: q for q in team.quotas.all()}
        changed = False
        for resource, row in wanted.items():
            old = have.get(resource)
            fields = (row.limit, row.borrowing_limit, row.lending_limit)
            if old is None or (old.limit, old.borrowing_limit, old.lending_limit) != fields:
                quota_set(
                    actor=None,
                    team=team,
                    resource=resource,
                    limit=row.limit,
                    borrowing_limit=row.borrowing_limit if cohort else None,
                    lending_limit=row.lending_limit if cohort else None,
                )
                changed = True
        for resource in have.keys() - wanted.keys():
            quota_delete(actor=None, team=team, resource=resource)
            changed = True
        outcome[team.slug] = f"read from ClusterQueue {name}" + (" (changed)" if changed else "")
    return outcome


def kueue_sync() -> dict[str, str]:
    """Kueue's configuration and the portal's teams in line, whoever owns it: written from
    the teams when the portal manages Kueue, read into them when the platform team does."""
    return kueue_managed_sync() if settings.KUEUE_MANAGED else kueue_external_read()
