"""The resource types the sandbox serves, with the facts discovery and messages need."""

from __future__ import annotations

from dataclasses import dataclass, field

ALL_VERBS = ["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"]


@dataclass(frozen=True)
class ResourceType:
    plural: str
    singular: str
    kind: str
    group: str
    version: str
    namespaced: bool
    short_names: tuple[str, ...] = ()
    verbs: tuple[str, ...] = tuple(ALL_VERBS)
    subresources: tuple[str, ...] = field(default=())
    categories: tuple[str, ...] = ()

    @property
    def key(self) -> str:
        """Store key and message spelling: ``pods``, ``jobs.batch``."""
        return f"{self.plural}.{self.group}" if self.group else self.plural

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version


RESOURCES: list[ResourceType] = [
    ResourceType(
        "namespaces",
        "namespace",
        "Namespace",
        "",
        "v1",
        False,
        ("ns",),
        ("create", "delete", "get", "list", "patch", "update", "watch"),
        ("status",),
    ),
    ResourceType("nodes", "node", "Node", "", "v1", False, ("no",), subresources=("status",)),
    ResourceType(
        "pods", "pod", "Pod", "", "v1", True, ("po",), subresources=("eviction", "log", "status")
    ),
    ResourceType("events", "event", "Event", "", "v1", True, ("ev",)),
    ResourceType(
        "services",
        "service",
        "Service",
        "",
        "v1",
        True,
        ("svc",),
        ("create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"),
        ("status",),
    ),
    ResourceType(
        "resourcequotas",
        "resourcequota",
        "ResourceQuota",
        "",
        "v1",
        True,
        ("quota",),
        subresources=("status",),
    ),
    ResourceType("limitranges", "limitrange", "LimitRange", "", "v1", True, ("limits",)),
    ResourceType("configmaps", "configmap", "ConfigMap", "", "v1", True, ("cm",)),
    ResourceType(
        "persistentvolumeclaims",
        "persistentvolumeclaim",
        "PersistentVolumeClaim",
        "",
        "v1",
        True,
        ("pvc",),
        subresources=("status",),
    ),
    ResourceType("secrets", "secret", "Secret", "", "v1", True),
    ResourceType("serviceaccounts", "serviceaccount", "ServiceAccount", "", "v1", True, ("sa",)),
    ResourceType("jobs", "job", "Job", "batch", "v1", True, (), subresources=("status",)),
    ResourceType(
        "deployments",
        "deployment",
        "Deployment",
        "apps",
        "v1",
        True,
        ("deploy",),
        subresources=("scale", "status"),
    ),
    ResourceType(
        "replicasets",
        "replicaset",
        "ReplicaSet",
        "apps",
        "v1",
        True,
        ("rs",),
        subresources=("scale", "status"),
    ),
    ResourceType(
        "daemonsets",
        "daemonset",
        "DaemonSet",
        "apps",
        "v1",
        True,
        ("ds",),
        subresources=("status",),
    ),
    ResourceType("leases", "lease", "Lease", "coordination.k8s.io", "v1", True),
    ResourceType(
        "poddisruptionbudgets",
        "poddisruptionbudget",
        "PodDisruptionBudget",
        "policy",
        "v1",
        True,
        ("pdb",),
        subresources=("status",),
    ),
    ResourceType(
        "ingresses",
        "ingress",
        "Ingress",
        "networking.k8s.io",
        "v1",
        True,
        ("ing",),
        subresources=("status",),
    ),
    ResourceType(
        "clusterroles", "clusterrole", "ClusterRole", "rbac.authorization.k8s.io", "v1", False
    ),
    ResourceType(
        "clusterrolebindings",
        "clusterrolebinding",
        "ClusterRoleBinding",
        "rbac.authorization.k8s.io",
        "v1",
        False,
    ),
    ResourceType("roles", "role", "Role", "rbac.authorization.k8s.io", "v1", True),
    ResourceType(
        "rolebindings", "rolebinding", "RoleBinding", "rbac.authorization.k8s.io", "v1", True
    ),
    ResourceType(
        "networkpolicies",
        "networkpolicy",
        "NetworkPolicy",
        "networking.k8s.io",
        "v1",
        True,
        ("netpol",),
    ),
    ResourceType(
        "priorityclasses",
        "priorityclass",
        "PriorityClass",
        "scheduling.k8s.io",
        "v1",
        False,
        ("pc",),
    ),
    # Kueue's visibility API (an aggregated API on a real cluster, served by Kueue): the
    # pending workloads of a ClusterQueue or LocalQueue (sandbox/api/visibility.py).
    ResourceType(
        "clusterqueues",
        "clusterqueue",
        "ClusterQueue",
        "visibility.kueue.x-k8s.io",
        "v1beta2",
        False,
        verbs=("get",),
        subresources=("pendingworkloads",),
    ),
    ResourceType(
        "localqueues",
        "localqueue",
        "LocalQueue",
        "visibility.kueue.x-k8s.io",
        "v1beta2",
        True,
        verbs=("get",),
        subresources=("pendingworkloads",),
    ),
    ResourceType(
        "customresourcedefinitions",
        "customresourcedefinition",
        "CustomResourceDefinition",
        "apiextensions.k8s.io",
        "v1",
        False,
        ("crd", "crds"),
        subresources=("status",),
        categories=("api-extensions",),
    ),
]

# Groups an APIService serves (aggregated APIs). A real API server lists groups by
# priority: built-in and CRD groups before an APIService's of lower groupPriorityMinimum
# (Kueue's visibility API: 100), so ``kubectl get clusterqueue`` means Kueue's CRD.
AGGREGATED = frozenset({"visibility.kueue.x-k8s.io"})

BY_PATH: dict[tuple[str, str, str], ResourceType] = {
    (r.group, r.version, r.plural): r for r in RESOURCES
}
BY_KEY: dict[str, ResourceType] = {r.key: r for r in RESOURCES}
GROUPS: dict[str, list[str]] = {}
for _r in RESOURCES:
    if _r.group and _r.version not in GROUPS.setdefault(_r.group, []):
        GROUPS[_r.group].append(_r.version)


def rtype(key: str) -> ResourceType:
    return BY_KEY[key]


def register(rt: ResourceType) -> None:
    """Serve ``rt`` (a CustomResourceDefinition's version) beside the built-in types."""
    unregister(rt.key, rt.version)
    RESOURCES.append(rt)
    BY_PATH[(rt.group, rt.version, rt.plural)] = rt
    BY_KEY.setdefault(rt.key, rt)
    if rt.version not in GROUPS.setdefault(rt.group, []):
        GROUPS[rt.group].append(rt.version)


def unregister(key: str, version: str | None = None) -> None:
    """Stop serving the type ``key`` (one version of it, or all)."""
    gone = [r for r in RESOURCES if r.key == key and version in (None, r.version)]
    for rt in gone:
        RESOURCES.remove(rt)
        BY_PATH.pop((rt.group, rt.version, rt.plural), None)
        if rt.version in GROUPS.get(rt.group, []):
            GROUPS[rt.group].remove(rt.version)
            if not GROUPS[rt.group]:
                GROUPS.pop(rt.group)
    remaining = [r for r in RESOURCES if r.key == key]
    if remaining:
        BY_KEY[key] = remaining[0]
    else:
        BY_KEY.pop(key, None)
