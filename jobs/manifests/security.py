"""The manifests' security check: every manifest is checked before it is stored or
applied (defence in depth).

The builders already produce safe manifests; this module does not trust them.
It enforces Pod Security Standards "restricted" plus the portal's own rules and
names the rule each violation breaks. Pure functions: no Django, no I/O.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from cluster.labels import WORKLOAD_SERVICE_ACCOUNT
from jobs.manifests.trainer import trainer_pods

Obj = dict[str, Any]

ALLOWED_VOLUME_TYPES = frozenset(
    {"persistentVolumeClaim", "emptyDir", "configMap", "secret", "projected", "downwardAPI"}
)
SECCOMP_ALLOWED = frozenset({"RuntimeDefault", "Localhost"})
CLUSTER_SCOPED = frozenset({"Namespace", "PriorityClass", "Node"})
WORKLOAD_KINDS = frozenset({"Job", "Deployment", "Pod"})


@dataclass(frozen=True)
class Violation:
    rule: str
    path: str
    message: str

    def __str__(self) -> str:
        return f"[{self.rule}] {self.path}: {self.message}"


def image_registry(image: str) -> str:
    """The registry host of an image reference (``docker.io`` when none is named)."""
    first, sep, _ = image.partition("/")
    if sep and ("." in first or ":" in first or first == "localhost"):
        return first.lower()
    return "docker.io"


def _pod_specs(manifest: Obj) -> list[tuple[str, Obj]]:
    """Every pod spec a manifest makes pods from, with its path: one for a Pod, Job or
    Deployment, one per replica type for a PyTorchJob, the trainer's for a TrainJob."""
    kind, spec = manifest.get("kind"), manifest.get("spec") or {}
    if kind == "Pod":
        return [("spec", spec)]
    if kind in ("Job", "Deployment"):
        return [("spec.template.spec", (spec.get("template") or {}).get("spec") or {})]
    if kind == "TrainJob":
        return [(f"{path}.spec", pod["spec"]) for path, pod in trainer_pods(manifest)]
    if kind == "PyTorchJob":
        return [
            (
                f"spec.pytorchReplicaSpecs.{rtype}.template.spec",
                ((replica or {}).get("template") or {}).get("spec") or {},
            )
            for rtype, replica in (spec.get("pytorchReplicaSpecs") or {}).items()
        ]
    return []


def _containers(pod: Obj, base: str) -> Iterator[tuple[str, Obj]]:
    for field in ("initContainers", "containers", "ephemeralContainers"):
        for index, container in enumerate(pod.get(field) or []):
            yield f"{base}.{field}[{index}]", container


def _check_pod(pod: Obj, base: str, allowed_registries: Iterable[str]) -> Iterator[Violation]:
    for field in ("hostNetwork", "hostPID", "hostIPC"):
        if pod.get(field):
            yield Violation("host-namespaces", f"{base}.{field}", "must not be true")
    tokenless = pod.get("serviceAccountName") == WORKLOAD_SERVICE_ACCOUNT  # mounts none
    if pod.get("automountServiceAccountToken") is not False and not (
        tokenless and pod.get("automountServiceAccountToken") is None
    ):
        yield Violation(
            "automount-service-account-token",
            f"{base}.automountServiceAccountToken",
            "must be false (or unset with the team's ServiceAccount "
            f"{WORKLOAD_SERVICE_ACCOUNT}): jobs get no Kubernetes API credentials",
        )
    for index, volume in enumerate(pod.get("volumes") or []):
        types = set(volume) - {"name"}
        if "hostPath" in types:
            yield Violation(
                "host-path", f"{base}.volumes[{index}]", "hostPath volumes are forbidden"
            )
        elif not types <= ALLOWED_VOLUME_TYPES:
            yield Violation(
                "volume-types",
                f"{base}.volumes[{index}]",
                f"type {', '.join(sorted(types))} is not allowed; allowed: "
                + ", ".join(sorted(ALLOWED_VOLUME_TYPES)),
            )
    pod_ctx = pod.get("securityContext") or {}
    pod_seccomp = (pod_ctx.get("seccompProfile") or {}).get("type")
    registries = {r.strip().lower() for r in allowed_registries if r.strip()}
    for path, container in _containers(pod, base):
        ctx = container.get("securityContext") or {}
        if ctx.get("privileged"):
            yield Violation("privileged", f"{path}.securityContext.privileged", "must not be true")
        if ctx.get("allowPrivilegeEscalation") is not False:
            yield Violation(
                "allow-privilege-escalation",
                f"{path}.securityContext.allowPrivilegeEscalation",
                "must be false",
            )
        capabilities = ctx.get("capabilities") or {}
        if "ALL" not in (capabilities.get("drop") or []):
            yield Violation(
                "capabilities", f"{path}.securityContext.capabilities.drop", "must drop ALL"
            )
        if capabilities.get("add"):
            yield Violation(
                "capabilities", f"{path}.securityContext.capabilities.add", "must be empty"
            )
        non_root = ctx.get("runAsNonRoot", pod_ctx.get("runAsNonRoot"))
        user = ctx.get("runAsUser", pod_ctx.get("runAsUser"))
        if non_root is not True or user == 0:
            yield Violation(
                "run-as-non-root", f"{path}.securityContext.runAsNonRoot", "must run as non-root"
            )
        seccomp = (ctx.get("seccompProfile") or {}).get("type") or pod_seccomp
        if seccomp not in SECCOMP_ALLOWED:
            yield Violation(
                "seccomp",
                f"{path}.securityContext.seccompProfile",
                "must be RuntimeDefault or Localhost",
            )
        for port_index, port in enumerate(container.get("ports") or []):
            if port.get("hostPort"):
                yield Violation(
                    "host-ports", f"{path}.ports[{port_index}].hostPort", "is forbidden"
                )
        image = str(container.get("image") or "")
        if registries and image_registry(image) not in registries:
            yield Violation(
                "image-registry",
                f"{path}.image",
                f"registry {image_registry(image)} is not allowed; use one of: "
                + ", ".join(sorted(registries)),
            )


def check_manifest(
    manifest: Obj, *, namespace: str, allowed_registries: Iterable[str] = ()
) -> list[Violation]:
    """Every rule the manifest breaks (empty when it is acceptable)."""
    violations: list[Violation] = []
    kind = manifest.get("kind")
    if (
        kind not in CLUSTER_SCOPED
        and (manifest.get("metadata") or {}).get("namespace") != namespace
    ):
        violations.append(
            Violation(
                "namespace", "metadata.namespace", f"must be the team's namespace {namespace}"
            )
        )
    for base, pod in _pod_specs(manifest):
        violations.extend(_check_pod(pod, base, list(allowed_registries)))
    return violations


def check_manifests(
    manifests: Iterable[Obj], *, namespace: str, allowed_registries: Iterable[str] = ()
) -> list[Violation]:
    registries = list(allowed_registries)
    return [
        v
        for manifest in manifests
        for v in check_manifest(manifest, namespace=namespace, allowed_registries=registries)
    ]
