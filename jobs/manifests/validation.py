"""Check generated manifests against the Kubernetes OpenAPI schema before applying.

The schemas are the strict ones shipped with ``kubernetes-validate`` (unknown
fields are errors), and validation follows ``kubernetes_validate.validate(obj,
version, strict=True)``: the same files, the same JSON Schema draft, the same
choice of schema version. It differs in three ways:

1. ``kubernetes_validate.validate`` re-reads the 1.4 MB ``_definitions.json``
   on every call; here each schema file is read once per process and the
   compiled validators are cached.
2. It raises on the first error; here every error is reported, each naming the
   object and the field, so a form can show them all at once.
3. Every manifest is first checked by ``jsonschema_rs`` (the same schema files
   and draft, compiled to native code: about 10 µs a manifest instead of about
   1 ms, which was a sixth of a job submission's CPU). Only when it finds a
   problem, or the manifest holds something other than plain JSON values, does
   ``jsonschema`` run and name the errors, so the messages (and the verdict on
   anything the two engines might see differently) stay ``jsonschema``'s. The
   strict schemas use only ``type``, ``$ref``, ``properties``,
   ``additionalProperties``, ``items``, ``required``, ``enum`` and ``oneOf``
   (``format`` is an annotation for both engines), on which the two agree;
   tests/jobs/test_manifests.py checks it.
"""

from __future__ import annotations

import functools
import json
import math
import re
from importlib import resources
from typing import Any

import jsonschema
import jsonschema_rs
import pydantic
import referencing
from kubeflow_trainer_api import models as trainer_models

from jobs.manifests.trainer import trainer_pods

_SCHEMA_ROOT = "kubernetes-json-schema"
_SCHEMA_DIR = re.compile(r"^v(?P<version>\d+\.\d+)\.\d+-local-strict$")


class UnsupportedKubernetesVersion(ValueError):
    """No schema shipped with kubernetes-validate is close enough to the requested version."""


def validate_manifests(manifests: list[dict[str, Any]], kubernetes_version: str) -> list[str]:
    """Schema errors of every manifest, as ``"<Kind>/<name>: <field>: <problem>"``.

    An empty list means every manifest is valid for ``kubernetes_version``
    (``"1.33"``, ``"v1.33.2"`` …; the newest shipped schema not newer than it
    is used, see ``schema_version_for``).
    """
    schema_version = schema_version_for(kubernetes_version)
    errors: list[str] = []
    for manifest in manifests:
        errors.extend(_manifest_errors(manifest, schema_version))
    return errors


def available_schema_versions() -> tuple[str, ...]:
    """``major.minor`` versions with strict schemas in the installed kubernetes-validate."""
    return _available_schema_versions()


def schema_version_for(kubernetes_version: str) -> str:
    """The shipped schema version to validate ``kubernetes_version`` against.

    The newest shipped version not newer than the requested one (what
    kubernetes-validate does); a version newer than every shipped schema is
    checked against the newest one, since API objects only gain fields.
    """
    match = re.match(r"^v?(\d+)\.(\d+)", kubernetes_version.strip())
    if match is None:
        raise UnsupportedKubernetesVersion(
            f"not a Kubernetes version: {kubernetes_version!r} (expected e.g. '1.33')"
        )
    wanted = (int(match.group(1)), int(match.group(2)))
    versions = _available_schema_versions()
    candidates = [version for version in versions if _major_minor(version) <= wanted]
    if not candidates:
        raise UnsupportedKubernetesVersion(
            f"Kubernetes {kubernetes_version} is older than every schema kubernetes-validate "
            f"ships (oldest: {versions[0]})"
        )
    return candidates[-1]


def _manifest_errors(manifest: Any, schema_version: str) -> list[str]:
    if not isinstance(manifest, dict):
        return [f"manifest is a {type(manifest).__name__}, not an object"]
    kind = manifest.get("kind")
    api_version = manifest.get("apiVersion")
    metadata = manifest.get("metadata")
    name = metadata.get("name") if isinstance(metadata, dict) else None
    label = f"{kind or '<no kind>'}/{name or '<no name>'}"
    if not isinstance(kind, str) or not isinstance(api_version, str):
        return [f"{label}: apiVersion and kind must both be strings"]
    if (api_version, kind) == ("kubeflow.org/v1", "PyTorchJob"):
        return _pytorchjob_errors(manifest, label, schema_version)
    if (api_version, kind) == ("trainer.kubeflow.org/v1alpha1", "TrainJob"):
        return _trainjob_errors(manifest, label, schema_version)
    file_name = _schema_file_name(kind, api_version)
    fast = _fast_validator(schema_version, file_name)
    if fast is not None and _plain_json(manifest) and fast.is_valid(manifest):
        return []
    validator = _validator(schema_version, file_name)
    if validator is None:
        return [f"{label}: no schema for {api_version} {kind} in Kubernetes {schema_version}"]
    found = sorted(validator.iter_errors(manifest), key=lambda error: list(map(str, error.path)))
    return [f"{label}: {_field_path(error)}: {error.message}" for error in found]


# A PyTorchJob's fields (kubeflow.org/v1, the training operator's API types), beside its
# replicas' pod templates, which are checked against Kubernetes' own PodTemplate schema.
_PYTORCHJOB_SPEC = {"pytorchReplicaSpecs", "runPolicy", "elasticPolicy", "nprocPerNode"}
_REPLICA = {"replicas", "restartPolicy", "template"}
_RESTART = {"Always", "OnFailure", "Never", "ExitCode"}
_RUN_POLICY = {
    "activeDeadlineSeconds", "backoffLimit", "cleanPodPolicy", "managedBy",
    "schedulingPolicy", "suspend", "ttlSecondsAfterFinished",
}  # fmt: skip


def _pytorchjob_errors(manifest: dict[str, Any], label: str, schema_version: str) -> list[str]:
    """A PyTorchJob against the training operator's types: its own fields by hand (the
    schema is small), each replica's pod template as a Kubernetes ``PodTemplate``."""
    errors: list[str] = []
    spec = manifest.get("spec")
    if not isinstance(spec, dict):
        return [f"{label}: spec: must be an object"]
    errors += [f"{label}: spec.{k}: unknown field" for k in sorted(set(spec) - _PYTORCHJOB_SPEC)]
    run_policy = spec.get("runPolicy") or {}
    errors += [
        f"{label}: spec.runPolicy.{k}: unknown field" for k in sorted(set(run_policy) - _RUN_POLICY)
    ]
    replicas = spec.get("pytorchReplicaSpecs")
    if not isinstance(replicas, dict) or not replicas:
        return [*errors, f"{label}: spec.pytorchReplicaSpecs: must name Master and/or Worker"]
    for rtype, replica in replicas.items():
        where = f"{label}: spec.pytorchReplicaSpecs.{rtype}"
        if rtype not in ("Master", "Worker"):
            errors.append(f"{where}: unknown replica type (Master or Worker)")
            continue
        errors += [f"{where}.{k}: unknown field" for k in sorted(set(replica) - _REPLICA)]
        if not isinstance(replica.get("replicas"), int) or replica["replicas"] < 1:
            errors.append(f"{where}.replicas: must be an integer of at least 1")
        if replica.get("restartPolicy", "OnFailure") not in _RESTART:
            errors.append(f"{where}.restartPolicy: must be one of {sorted(_RESTART)}")
        containers = ((replica.get("template") or {}).get("spec") or {}).get("containers") or []
        if not any(c.get("name") == "pytorch" for c in containers):
            errors.append(f"{where}.template: the operator needs a container named pytorch")
        template = {
            "apiVersion": "v1",
            "kind": "PodTemplate",
            "metadata": {"name": manifest.get("metadata", {}).get("name", "x")},
            "template": replica.get("template"),
        }
        errors += [
            error.replace("PodTemplate/", f"PyTorchJob {rtype} ", 1)
            for error in _manifest_errors(template, schema_version)
        ]
    return errors


def _trainjob_errors(manifest: dict[str, Any], label: str, schema_version: str) -> list[str]:
    """A TrainJob against Kubeflow Trainer's published types (``kubeflow-trainer-api``, the
    models Trainer generates from its Go types: every field's type, required fields, and any
    field they do not know, which Trainer's API server would prune), and the trainer's pods
    (the trainer's container with the runtime patch's pod fields) as a Kubernetes
    ``PodTemplate``."""
    try:
        typed = trainer_models.TrainerV1alpha1TrainJob.from_dict(manifest)
    except pydantic.ValidationError as exc:
        return [
            f"{label}: {'.'.join(map(str, error['loc']))}: {error['msg']}" for error in exc.errors()
        ]
    except ValueError as exc:  # a one-of type (a quantity) none of whose forms fits
        return [f"{label}: {str(exc).splitlines()[0]}"]
    assert typed is not None
    errors = [f"{label}: {path}: unknown field" for path in _unknown(manifest, typed.to_dict())]
    for path, pod in trainer_pods(manifest):
        pod_template = {
            "apiVersion": "v1",
            "kind": "PodTemplate",
            "metadata": {"name": manifest.get("metadata", {}).get("name", "x")},
            "template": pod,
        }
        errors += [
            error.replace("PodTemplate/", f"TrainJob {path} ", 1)
            for error in _manifest_errors(pod_template, schema_version)
        ]
    return errors


def _unknown(given: Any, known: Any, path: str = "") -> list[str]:
    """The paths of ``given`` that the typed round trip ``known`` dropped."""
    if isinstance(given, dict) and isinstance(known, dict):
        return [
            found
            for key, value in given.items()
            for found in (
                _unknown(value, known[key], f"{path}.{key}".lstrip("."))
                if key in known
                else [f"{path}.{key}".lstrip(".")]
            )
        ]
    if isinstance(given, list) and isinstance(known, list):
        return [
            found
            for i, (a, b) in enumerate(zip(given, known, strict=False))
            for found in _unknown(a, b, f"{path}[{i}]")
        ]
    return []


def _plain_json(value: Any) -> bool:
    """Only what JSON has: dicts with string keys, lists, strings, finite numbers, bools, None.

    ``jsonschema_rs`` converts other Python values itself (a tuple passes as an array)
    where ``jsonschema`` would refuse them, so those go to ``jsonschema`` alone.
    """
    if isinstance(value, dict):
        return all(isinstance(key, str) and _plain_json(item) for key, item in value.items())
    if isinstance(value, list):
        return all(_plain_json(item) for item in value)
    if isinstance(value, float):
        return math.isfinite(value)
    return value is None or isinstance(value, str | int)  # bool is an int


def _field_path(error: jsonschema.ValidationError) -> str:
    """``spec.template.spec.containers[0].image`` style, ``<root>`` for the object itself."""
    path = ""
    for part in error.absolute_path:
        if isinstance(part, int):
            path += f"[{part}]"
        else:
            path += f".{part}" if path else str(part)
    return path or "<root>"


def _schema_file_name(kind: str, api_version: str) -> str:
    # kubernetes-validate's naming: group domain dropped, "/" → "-", kind lower
    # case: apps/v1 Deployment → deployment-apps-v1.json, v1 Service → service-v1.json.
    group_version = re.sub(r"^([^./]*)(?:\.[^/]*)?/", r"\1-", api_version)
    return f"{kind.lower()}-{group_version}.json"


def _schema_dir(schema_version: str) -> Any:
    return resources.files("kubernetes_validate").joinpath(
        _SCHEMA_ROOT, f"v{schema_version}.0-local-strict"
    )


@functools.cache
def _available_schema_versions() -> tuple[str, ...]:
    root = resources.files("kubernetes_validate").joinpath(_SCHEMA_ROOT)
    versions = [
        match.group("version")
        for entry in root.iterdir()
        if (match := _SCHEMA_DIR.match(entry.name)) is not None
    ]
    if not versions:
        raise UnsupportedKubernetesVersion("kubernetes-validate ships no strict schemas")
    return tuple(sorted(versions, key=_major_minor))


def _major_minor(version: str) -> tuple[int, int]:
    major, minor = version.split(".")[:2]
    return int(major), int(minor)


@functools.cache
def _definitions_json(schema_version: str) -> dict[str, Any]:
    """The shared ``_definitions.json`` of one version: read once, it is 1.4 MB."""
    text = _schema_dir(schema_version).joinpath("_definitions.json").read_text(encoding="utf-8")
    definitions: dict[str, Any] = json.loads(text)
    return definitions


@functools.cache
def _definitions(schema_version: str) -> referencing.Resource[Any]:
    return referencing.Resource.from_contents(_definitions_json(schema_version))


def _schema_json(schema_version: str, file_name: str) -> dict[str, Any] | None:
    schema_file = _schema_dir(schema_version).joinpath(file_name)
    if not schema_file.is_file():
        return None
    schema: dict[str, Any] = json.loads(schema_file.read_text(encoding="utf-8"))
    return schema


@functools.cache
def _fast_validator(schema_version: str, file_name: str) -> jsonschema_rs.Validator | None:
    """The same schema for ``jsonschema_rs``: formats unchecked (as ``jsonschema`` by
    default), every ``$ref`` answered from ``_definitions.json``, nothing fetched."""
    schema = _schema_json(schema_version, file_name)
    if schema is None:
        return None
    definitions = _definitions_json(schema_version)
    return jsonschema_rs.validator_for(
        schema,
        registry=jsonschema_rs.Registry([(definitions["$id"], definitions)]),
        validate_formats=False,
        offline=True,
    )


@functools.cache
def _validator(schema_version: str, file_name: str) -> jsonschema.protocols.Validator | None:
    schema = _schema_json(schema_version, file_name)
    if schema is None:
        return None
    registry: referencing.Registry[Any] = referencing.Registry().with_resources(
        [
            (schema["$id"], referencing.Resource.from_contents(schema)),
            (_definitions(schema_version).id() or "", _definitions(schema_version)),
        ]
    )
    validator_class = jsonschema.validators.validator_for(schema)
    return validator_class(schema, registry=registry)
