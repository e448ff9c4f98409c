"""Make the cluster match a team: Namespace, ResourceQuota, LimitRange, NetworkPolicy,
PriorityClasses.

Level-triggered and idempotent: each object is compared with what it should be
and only created or replaced when it differs, so running it again changes nothing.
"""

from __future__ import annotations

import logging
from typing import Any

from django.conf import settings

from cluster import kube
from cluster.labels import (
    COMPONENT_LABEL,
    MANAGED_BY_LABEL,
    TEAM_LABEL,
    WORKLOAD_SERVICE_ACCOUNT,
)
from cluster.models import Cluster
from cluster.priority_classes import priority_classes
from cluster.selectors import Catalog, catalog_get
from cluster.services import cluster_current, clusters_tracked
from cluster.training_runtime import training_runtime_sync
from scheduling import parse_quantity
from scheduling.quantity import quota_quantity
from scheduling.resources import ANY_GPU, CPU, MEMORY, MIG_PREFIX, SHARED_GPU
from teams import kueue_config
from teams.audit import audit_record
from teams.models import Team
from teams.selectors import TeamQuotas, cohort_pool, quotas_on_cluster, team_has_cluster

logger = logging.getLogger(__name__)

RESOURCE_QUOTA_NAME = "gpu-portal-quota"
LIMIT_RANGE_NAME = "gpu-portal-defaults"
NETWORK_POLICY_NAME = "gpu-portal-isolation"
WORKSPACE_NETWORK_POLICY_NAME = "gpu-portal-workspaces"
# The component label value of a workspace's objects (jobs.manifests.naming: the kind).
WORKSPACE_COMPONENT = "workspace"
# The label the API server puts on every namespace (its name): what a namespaceSelector
# can name a namespace by without anyone labelling it.
NAMESPACE_NAME_LABEL = "kubernetes.io/metadata.name"
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
    for resource in (CPU, MEMORY):
        if resource in limits:
            values[f"requests.{resource}"] = quota_quantity(resource, limits[resource])
            values[f"limits.{resource}"] = quota_quantity(resource, limits[resource])
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


def workload_service_account_manifest(team: Team) -> dict[str, Any]:
    """A ServiceAccount that mounts no API token, for pods whose ``automountServiceAccountToken``
    the portal cannot set itself (a TrainJob's: Trainer's runtime patches do not reach it)."""
    return {
        "apiVersion": "v1",
        "kind": "ServiceAccount",
        "metadata": {
            "name": WORKLOAD_SERVICE_ACCOUNT,
            "namespace": team.namespace,
            "labels": {MANAGED_BY_LABEL: "gpu-portal", TEAM_LABEL: team.slug},
        },
        "automountServiceAccountToken": False,
    }


def _service_account_same(existing: dict[str, Any], wanted: dict[str, Any]) -> bool:
    return existing.get("automountServiceAccountToken") is False


def network_policy_manifest(
    team: Team, *, ingress_namespaces: list[str], egress_cidrs: list[str]
) -> dict[str, Any]:
    """The GPU guides' isolation (docs/references.md) for every pod of the team's namespace:
    ingress only from the namespace itself and from ``ingress_namespaces`` (Prometheus, the
    ingress controller); egress open, or with ``egress_cidrs`` DNS plus those networks only."""
    sources: list[dict[str, Any]] = [{"podSelector": {}}]
    sources += [
        {"namespaceSelector": {"matchLabels": {NAMESPACE_NAME_LABEL: name}}}
        for name in ingress_namespaces
    ]
    spec: dict[str, Any] = {
        # Every pod but the workspaces': policies add up, so a workspace pod selected here
        # would be open to the whole namespace whatever its own policy says.
        "podSelector": {
            "matchExpressions": [
                {"key": COMPONENT_LABEL, "operator": "NotIn", "values": [WORKSPACE_COMPONENT]}
            ]
        },
        "policyTypes": ["Ingress"],
        "ingress": [{"from": sources}],
    }
    if egress_cidrs:
        spec["policyTypes"] = ["Ingress", "Egress"]
        spec["egress"] = [
            {
                # The cluster DNS, wherever it runs (kube-system's kube-dns in most clusters).
                "to": [
                    {
                        "namespaceSelector": {},
                        "podSelector": {"matchLabels": {"k8s-app": "kube-dns"}},
                    }
                ],
                "ports": [{"protocol": "UDP", "port": 53}, {"protocol": "TCP", "port": 53}],
            },
            {"to": [{"ipBlock": {"cidr": cidr}} for cidr in egress_cidrs]},
        ]
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {
            "name": NETWORK_POLICY_NAME,
            "namespace": team.namespace,
            "labels": {MANAGED_BY_LABEL: "gpu-portal", TEAM_LABEL: team.slug},
        },
        "spec": spec,
    }


def workspace_network_policy_manifest(team: Team, *, portal_namespace: str) -> dict[str, Any]:
    """Workspace pods take traffic from the portal's namespace only (its proxy): not from
    the team's other pods, nor another team's (docs/workspaces.md). Their egress is the
    team's (the isolation policy's egress rules, when set, do not select them: open)."""
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {
            "name": WORKSPACE_NETWORK_POLICY_NAME,
            "namespace": team.namespace,
            "labels": {MANAGED_BY_LABEL: "gpu-portal", TEAM_LABEL: team.slug},
        },
        "spec": {
            "podSelector": {"matchLabels": {COMPONENT_LABEL: WORKSPACE_COMPONENT}},
            "policyTypes": ["Ingress"],
            "ingress": [
                {
                    "from": [
                        {
                            "namespaceSelector": {
                                "matchLabels": {NAMESPACE_NAME_LABEL: portal_namespace}
                            }
                        }
                    ]
                }
            ],
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


def _network_policy_same(existing: dict[str, Any], wanted: dict[str, Any]) -> bool:
    return existing.get("spec") == wanted["spec"] and _labels_present(existing, wanted)


def _network_policies_sync(team: Team) -> dict[str, str]:
    """Create or update the team's NetworkPolicies (its isolation, and its workspaces'), or
    remove the portal's own when ``TEAM_NETWORK_POLICY`` is off; every change is audited."""
    wanted = [
        network_policy_manifest(
            team,
            ingress_namespaces=list(settings.TEAM_NETWORK_POLICY_INGRESS_NAMESPACES),
            egress_cidrs=list(settings.TEAM_NETWORK_POLICY_EGRESS_CIDRS),
        ),
        workspace_network_policy_manifest(team, portal_namespace=settings.PORTAL_NAMESPACE),
    ]
    return {
        f"NetworkPolicy/{policy['metadata']['name']}": _network_policy_sync(team, policy)
        for policy in wanted
    }


def _network_policy_sync(team: Team, wanted: dict[str, Any]) -> str:
    name = wanted["metadata"]["name"]
    if settings.TEAM_NETWORK_POLICY:
        result = kube.ensure(wanted, compare=_network_policy_same)
        changes: dict[str, Any] = {"spec": wanted["spec"]}
    else:
        try:
            existing = kube.get("NetworkPolicy", name, team.namespace)
        except kube.ObjectNotFound:
            return "absent"
        labels = existing.get("metadata", {}).get("labels") or {}
        if labels.get(MANAGED_BY_LABEL) != "gpu-portal":
            return "unchanged"  # someone else's: not the portal's to remove
        kube.delete("NetworkPolicy", name, team.namespace)
        result, changes = "deleted", {}
    if result != "unchanged":
        audit_record(
            actor=None,
            action=f"team.network_policy_{result}",
            target=f"{team.slug}: NetworkPolicy {team.namespace}/{name}",
            changes=changes,
        )
    return result


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


def team_quota_ceilings(*, team: Team, cluster: Cluster | None = None) -> dict[str, int]:
    """What the team's ResourceQuota on the cluster (the first with ``None``) allows: its
    nominal quota there, or in a cohort the most it may legitimately reach by borrowing
    (nominal + borrowing limit, or what the cohort lends there when there is no limit).
    The portal's admission stays the guard of the cohort's total; the ResourceQuota only
    stops what the portal would never admit."""
    cluster = cluster or cluster_current()
    rows = list(quotas_on_cluster(team=team, cluster=cluster))
    quotas = TeamQuotas(
        team=team,
        limits={q.resource: q.limit for q in rows},
        borrowing_limits={q.resource: q.borrowing_limit for q in rows},
        lending_limits={q.resource: q.lending_limit for q in rows},
    )
    if team.cohort_id is None:
        return quotas.limits
    return quotas.ceilings(cohort_pool(cohort_id=team.cohort_id, cluster=cluster))


def _namespace_made(team: Team) -> bool:
    try:
        kube.get("Namespace", team.namespace)
    except kube.ObjectNotFound:
        return False
    return True


def team_cluster_sync(*, team_id: int, cluster: Cluster | None = None) -> dict[str, str]:
    """Namespace, ResourceQuota, LimitRange, the workloads' ServiceAccount and NetworkPolicy
    of one team in the cluster (the first with ``None``; the Kubernetes adapter bound to
    it), plus the PriorityClasses and (where Trainer runs) the portal's
    ClusterTrainingRuntime.

    Only where the team has quota (``team_has_cluster``): elsewhere its namespace is not
    made, and one made before keeps its objects, its ResourceQuota now allowing nothing
    (its jobs there, if any, run on; nothing is deleted under them).

    Returns what happened to each object (``created``/``updated``/``unchanged``; the
    NetworkPolicy may also be ``deleted`` or ``absent`` when ``TEAM_NETWORK_POLICY`` is off).
    Raises ``kube.TemporaryClusterError`` when the cluster cannot be reached.
    """
    team = Team.objects.get(pk=team_id)
    cluster = cluster or cluster_current()
    if not team_has_cluster(team=team, cluster=cluster) and not _namespace_made(team):
        return {f"Namespace/{team.namespace}": "not wanted (no quota here)"}
    catalog = catalog_get()
    limits = team_quota_ceilings(team=team, cluster=cluster)
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
    outcome[f"ServiceAccount/{WORKLOAD_SERVICE_ACCOUNT}"] = kube.ensure(
        workload_service_account_manifest(team), compare=_service_account_same
    )
    outcome.update(_network_policies_sync(team))
    for name, result in priority_classes_sync().items():
        outcome[f"PriorityClass/{name}"] = result
    outcome.update(training_runtime_sync())
    changed = {k: v for k, v in outcome.items() if v != "unchanged"}
    if changed:
        logger.info("team %s: cluster objects %s", team.slug, changed)
    return outcome


def team_clusters_sync(*, team_id: int | None) -> dict[str, str]:
    """``team_cluster_sync`` (and Kueue's configuration with ``kueue``) in every cluster that
    is not disabled: a job may be placed on any of them. The first cluster's outcome keys as
    they always were, another's prefixed by its name (``h200-east: Namespace/team-x``).

    The first cluster's errors propagate (the task retries them, as before several
    clusters); another's are logged and reported (``<name>: error``) and left to the
    periodic pass, so one cluster down holds up no other. ``team_id=None``: Kueue's
    configuration alone (a team deleted since)."""
    outcome: dict[str, str] = {}
    for cluster in clusters_tracked():
        first = cluster.name == settings.CLUSTER_NAME
        prefix = "" if first else f"{cluster.name}: "
        try:
            with kube.on_cluster(cluster.access_to()):
                done = (
                    team_cluster_sync(team_id=team_id, cluster=cluster)
                    if team_id is not None
                    else {}
                )
                # Kueue's configuration is read back (external mode) from the first alone.
                if first:
                    done.update(kueue_config.kueue_sync())
                elif settings.KUEUE_MANAGED:
                    done.update(kueue_config.kueue_managed_sync(cluster=cluster))
        except kube.ClusterError as exc:
            if first:
                raise
            logger.warning("team %s: cluster %s not mirrored: %s", team_id, cluster.name, exc)
            outcome[f"{prefix}error"] = exc.message
            continue
        outcome.update({f"{prefix}{key}": value for key, value in done.items()})
    return outcome
