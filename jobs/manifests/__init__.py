"""Pure builders turning a ``JobSpec`` into Kubernetes manifests (no Django, no I/O).

Typical use::

    ctx = ManifestContext(job_id=job.id, namespace=team.namespace)
    manifests = build_manifests(spec, ctx)
    errors = validate_manifests(manifests, ctx.kubernetes_version)  # [] means valid
    preview = to_yaml(manifests)
"""

from jobs.manifests.builders import (
    CONTAINER_NAME,
    DISTRIBUTED_ENV_NAMES,
    Manifest,
    build_manifests,
)
from jobs.manifests.context import ManifestContext
from jobs.manifests.naming import job_id_selector, object_labels, object_name
from jobs.manifests.render import to_yaml
from jobs.manifests.resources import (
    container_resources,
    gpu_resource_name,
    parse_quantity,
    resource_defaults,
)
from jobs.manifests.validation import (
    UnsupportedKubernetesVersion,
    available_schema_versions,
    schema_version_for,
    validate_manifests,
)

__all__ = [
    "CONTAINER_NAME",
    "DISTRIBUTED_ENV_NAMES",
    "Manifest",
    "ManifestContext",
    "UnsupportedKubernetesVersion",
    "available_schema_versions",
    "build_manifests",
    "container_resources",
    "gpu_resource_name",
    "job_id_selector",
    "object_labels",
    "object_name",
    "parse_quantity",
    "resource_defaults",
    "schema_version_for",
    "to_yaml",
    "validate_manifests",
]
