"""Make the cluster match a team: Namespace, ResourceQuota, LimitRange, PriorityClasses.

Level-triggered and idempotent: each object is compared with what it should be
and only created or replaced when it differs, so running it again changes nothing.
"""

from __future__ import annotations

import logging
from typing import Any

from cluster import kube
from cluster.labels import MANAGED_BY_LABEL, TEAM_LABEL
from cluster.priority_classes import priority_classes
from cluster.selectors import Catalog, catalog_get
from scheduling import parse_quantity
from scheduling.resources import ANY_GPU, CPU, MEMORY, MIG_PREFIX, SHARED_GPU
from teams.models import GpuQuota, Team
from teams.selectors import TeamQuotas, cohort_pool

logger = logging.getLogger(__name__)

RESOURCE_QUOTA_NAME = "gpu-portal-quota"
LIMIT_RANGE_NAME = "gpu-portal-defaults"
# Containers that name no resources (none the portal creates) get a small, bounded default.
LIMIT_RANGE_DEFAULT = {"cpu": "1", "memory": "2Gi"}


def namespace_manifest(team: Team) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {
            "name": team.namespace,
            "labels": {
                "pod-security.kubernetes.io/enforce": "restricted",
                "pod-security.kubernetes.io/enforce-version": "latest",
                "pod-security.kubernetes.io/warn": "restricted",
                MANAGED_BY_LABEL: "gpu-portal",
                TEAM_LABEL: team.slug,
            },
        },
    }


def quota_hard(limits: dict[str, int], catalog: Catalog) -> dict[str, str]:
    """The ResourceQuota ``hard`` mirroring the portal's quotas.

    Kubernetes quotas extended resources only as ``requests.<name>`` and knows
    nothing of GPU products, so per-product quotas are summed into
    ``requests.nvidia.com/gpu`` unless an any-GPU quota caps it. A GPU kind the
    team has no quota for gets 0: the portal refuses it, and so does the cluster.
    """
    hard: dict[str, int] = {}
    product_total = sum(v for k, v in limits.items() if k in catalog.products)
    gpus = limits.get(ANY_GPU, product_total)
    shared = limits.get(SHARED_GPU, 0)
    if catalog.shared_gpu_resource == ANY_GPU:
        # Time-slicing without renameByDefault: shared GPUs are plain nvidia.com/gpu.
        gpus += shared
    else:
        hard[f"requests.{SHARED_GPU}"] = shared
    hard[f"requests.{ANY_GPU}"] = gpus
    for profile in catalog.mig_profiles:
        resource = f"{MIG_PREFIX}{profile}"
        hard[f"requests.{resource}"] = limits.get(resource, 0)
    values = {key: str(value) for key, value in hard.items()}
    if CPU in limits:
        values["requests.cpu"] = str(limits[CPU])
        values["limits.cpu"] = str(limits[CPU])
    if MEMORY in limits:
        values["requests.memory"] = f"{limits[MEMORY]}Gi"
        values["limits.memory"] = f"{limits[MEMORY]}Gi"
    return dict(sorted(values.items()))


def resource_quota_manifest(team: Team, hard: dict[str, str]) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ResourceQuota",
        "metadata": {
            "name": RESOURCE_QUOTA_NAME,
            "namespace": team.namespace,
            "labels": {MANAGED_BY_LABEL: "gpu-portal", TEAM_LABEL: team.slug},
        },
        "spec": {"hard": hard},
    }


def limit_range_manifest(team: Team) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "LimitRange",
        "metadata": {
            "name": LIMIT_RANGE_NAME,
            "namespace": team.namespace,
            "labels": {MANAGED_BY_LABEL: "gpu-portal", TEAM_LABEL: team.slug},
        },
        "spec": {
            "limits": [
                {
                    "type": "Container",
                    "default": dict(LIMIT_RANGE_DEFAULT),
                    "defaultRequest": dict(LIMIT_RANGE_DEFAULT),
                }
            ]
        },
    }


def _same_quantities(a: dict[str, Any], b: dict[str, Any]) -> bool:
    try:
        return a.keys() == b.keys() and all(
            parse_quantity(str(a[k])) == parse_quantity(str(b[k])) for k in a
        )
    except ValueError:
        return a == b


def _labels_present(existing: dict[str, Any], wanted: dict[str, Any]) -> bool:
    have = existing.get("metadata", {}).get("labels") or {}
    return all(have.get(k) == v for k, v in wanted["metadata"]["labels"].items())


def _namespace_same(existing: dict[str, Any], wanted: dict[str, Any]) -> bool:
    return _labels_present(existing, wanted)


def _quota_same(existing: dict[str, Any], wanted: dict[str, Any]) -> bool:
    have = (existing.get("spec") or {}).get("hard") or {}
    return _labels_present(existing, wanted) and _same_quantities(have, wanted["spec"]["hard"])


def _limit_range_same(existing: dict[str, Any], wanted: dict[str, Any]) -> bool:
    have = (existing.get("spec") or {}).get("limits") or []
    want = wanted["spec"]["limits"]
    if len(have) != len(want):
        return False
    return all(
        h.get("type") == w["type"]
        and _same_quantities(h.get("default") or {}, w["default"])
        and _same_quantities(h.get("defaultRequest") or {}, w["defaultRequest"])
        for h, w in zip(have, want, strict=True)
    ) and _labels_present(existing, wanted)


def _priority_class_same(existing: dict[str, Any], wanted: dict[str, Any]) -> bool:
    if existing.get("value") != wanted.get("value"):
        # value is immutable: replacing would be refused; say so instead of looping.
        raise kube.PermanentClusterError(
            f"PriorityClass {wanted['metadata']['name']} exists with value "
            f"{existing.get('value')}, not {wanted['value']}; delete it to let the portal "
            "create its own."
        )
    return existing.get("description") == wanted.get("description")


def priority_classes_sync() -> dict[str, str]:
    """The four cluster-wide PriorityClasses; returns name → created/updated/unchanged."""
    return {
        pc["metadata"]["name"]: kube.ensure(pc, compare=_priority_class_same)
        for pc in priority_classes()
    }


def team_quota_ceilings(*, team: Team) -> dict[str, int]:
    """What the team's ResourceQuota allows: its nominal quota, or in a cohort the most it
    may legitimately reach by borrowing (nominal + borrowing limit, or what the cohort
    lends when there is no limit). The portal's admission stays the guard of the cohort's
    total; the ResourceQuota only stops what the portal would never admit."""
    rows = list(GpuQuota.objects.filter(team=team))
    quotas = TeamQuotas(
        team=team,
        limits={q.resource: q.limit for q in rows},
        borrowing_limits={q.resource: q.borrowing_limit for q in rows},
        lending_limits={q.resource: q.lending_limit for q in rows},
    )
    if team.cohort_id is None:
        return quotas.limits
    return quotas.ceilings(cohort_pool(cohort_id=team.cohort_id))


def team_cluster_sync(*, team_id: int) -> dict[str, str]:
    """Namespace, ResourceQuota and LimitRange of one team, plus the PriorityClasses.

    Returns what happened to each object (``created``/``updated``/``unchanged``).
    Raises ``kube.TemporaryClusterError`` when the cluster cannot be reached.
    """
    team = Team.objects.get(pk=team_id)
    catalog = catalog_get()
    limits = team_quota_ceilings(team=team)
    outcome = {
        f"Namespace/{team.namespace}": kube.ensure(
            namespace_manifest(team), compare=_namespace_same
        )
    }
    outcome[f"ResourceQuota/{RESOURCE_QUOTA_NAME}"] = kube.ensure(
        resource_quota_manifest(team, quota_hard(limits, catalog)), compare=_quota_same
    )
    outcome[f"LimitRange/{LIMIT_RANGE_NAME}"] = kube.ensure(
        limit_range_manifest(team), compare=_limit_range_same
    )
    for name, result in priority_classes_sync().items():
        outcome[f"PriorityClass/{name}"] = result
    changed = {k: v for k, v in outcome.items() if v != "unchanged"}
    if changed:
        logger.info("team %s: cluster objects %s", team.slug, changed)
    return outcome
