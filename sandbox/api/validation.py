"""Request body checks in the order the API server applies them.

1. Decoding against the OpenAPI schema (``kubernetes_validate``): a wrong JSON type is a
   400 "cannot be handled as", an unknown field is dropped with a ``Warning`` header
   (``fieldValidation=Warn``, the server default) or refused (``Strict``).
2. Field validation of the defaulted object: 422 ``Invalid`` with ``details.causes``.
"""

from __future__ import annotations

import functools
import json
import re
from importlib import resources
from typing import Any

import jsonschema
import referencing
from kubernetes_validate.utils import all_versions, major_minor

from sandbox import quantity
from sandbox.api import crds
from sandbox.api.resources import ResourceType
from sandbox.errors import Cause, bad_request, invalid
from sandbox.label_selectors import match_label_selector_obj

SCHEMA_VERSION = "1.33"
DNS1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
DNS1123_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
LABEL_MSG = (
    "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', "
    "and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', "
    "regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')"
)
SUBDOMAIN_MSG = (
    "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' "
    "or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex "
    "used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"
)
_GO_TYPES = {
    "integer": "int32",
    "string": "string",
    "boolean": "bool",
    "object": "map",
    "array": "slice",
}


def go_value(value: Any) -> str:
    """How Go's ``%v`` prints a value in ``Invalid value: …``."""
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, bool):
        return "true" if value else "false"
    return json.dumps(value) if isinstance(value, dict | list) else str(value)


def _path_text(path: list[Any]) -> str:
    text = ""
    for part in path:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text


@functools.cache
def _definitions(schema_dir: str) -> referencing.Resource[Any]:
    path = resources.files("kubernetes_validate").joinpath(
        f"kubernetes-json-schema/{schema_dir}/_definitions.json"
    )
    return referencing.Resource.from_contents(json.loads(path.read_text(encoding="utf-8")))


@functools.cache
def _validator(kind: str, api_version: str) -> jsonschema.protocols.Validator | None:
    """What ``kubernetes_validate.validate(obj, SCHEMA_VERSION, strict=True)`` checks against
    (same files, same draft), read once per kind: that function re-reads the 1.4 MB
    definitions on every call, which made each create cost tens of milliseconds."""
    version = [v for v in all_versions() if major_minor(v) <= SCHEMA_VERSION][-1]
    schema_dir = f"v{version}-local-strict"
    group_version = re.sub(r"^([^./]*)(?:\.[^/]*)?/", r"\1-", api_version)
    path = resources.files("kubernetes_validate").joinpath(
        f"kubernetes-json-schema/{schema_dir}/{kind.lower()}-{group_version}.json"
    )
    if not path.is_file():
        return None
    schema = referencing.Resource.from_contents(json.loads(path.read_text(encoding="utf-8")))
    registry: referencing.Registry[Any] = _definitions(schema_dir) @ referencing.Registry()
    registry = schema @ registry
    return jsonschema.validators.Draft202012Validator(schema.contents, registry=registry)


def check_schema(rt: ResourceType, obj: dict[str, Any], field_validation: str) -> list[str]:
    """Validate ``obj`` in place against the 1.33 schema (a custom object: against its
    CRD's, ``sandbox.api.crds``); return ``Warning`` header texts."""
    if crds.served(rt) is not None:
        return crds.check(rt, obj, field_validation)
    warnings: list[str] = []
    for _ in range(50):
        validator = _validator(str(obj.get("kind", "")), str(obj.get("apiVersion", "")))
        if validator is None:  # a kind the schemas do not know: nothing to check
            return warnings
        try:
            validator.validate(obj)
            return warnings
        except jsonschema.ValidationError as err:
            path = list(err.path)
            if err.validator == "additionalProperties":
                extra = re.findall(r"'([^']+)' (?:was|were) unexpected", err.message)
                names = extra or re.findall(r"'([^']+)'", err.message.split("(")[-1])
                holder: Any = obj
                for part in path:
                    holder = holder[part]
                for name in names:
                    field = _path_text([*path, name])
                    if field_validation == "Strict":
                        raise bad_request(
                            f'strict decoding error: unknown field "{field}"'
                        ) from None
                    if field_validation != "Ignore":
                        warnings.append(f'unknown field "{field}"')
                    holder.pop(name, None)
                continue
            field = _path_text(path)
            if err.validator == "required":
                missing = re.findall(r"'([^']+)' is a required property", err.message)
                name = obj.get("metadata", {}).get("name", "")
                raise invalid(
                    rt.kind,
                    rt.group,
                    name,
                    [
                        Cause(
                            _path_text([*path, *missing[:1]]),
                            "Required value",
                            "FieldValueRequired",
                        )
                    ],
                ) from None
            if err.validator == "type":
                expected = err.validator_value
                expected = expected[0] if isinstance(expected, list) else expected
                actual = type(err.instance).__name__
                actual = {
                    "str": "string",
                    "int": "number",
                    "float": "number",
                    "dict": "object",
                    "list": "array",
                    "bool": "bool",
                }.get(actual, actual)
                raise bad_request(
                    f'{rt.kind} in version "{rt.version}" cannot be handled as a {rt.kind}: '
                    f"json: cannot unmarshal {actual} into Go struct field "
                    f".{field} of type {_GO_TYPES.get(str(expected), str(expected))}"
                ) from None
            name = obj.get("metadata", {}).get("name", "")
            raise invalid(
                rt.kind,
                rt.group,
                name,
                [Cause(field, f"Invalid value: {go_value(err.instance)}: {err.message}")],
            ) from None
    return warnings


# -- field validation ------------------------------------------------------------------------
def _name_causes(rt: ResourceType, meta: dict[str, Any]) -> list[Cause]:
    name = meta.get("name") or ""
    if not name:
        return [
            Cause(
                "metadata.name",
                "Required value: name or generateName is required",
                "FieldValueRequired",
            )
        ]
    label_only = rt.plural in ("namespaces", "services")
    pattern, msg = (DNS1123_LABEL, LABEL_MSG) if label_only else (DNS1123_SUBDOMAIN, SUBDOMAIN_MSG)
    limit = 63 if label_only or rt.plural == "jobs" else 253
    causes = []
    if not pattern.match(name):
        causes.append(Cause("metadata.name", f"Invalid value: {go_value(name)}: {msg}"))
    if len(name) > limit:
        causes.append(
            Cause(
                "metadata.name",
                f"Invalid value: {go_value(name)}: must be no more than {limit} characters",
            )
        )
    return causes


def _nonneg(
    causes: list[Cause], spec: dict[str, Any], key: str, prefix: str, minimum: int = 0
) -> None:
    value = spec.get(key)
    if isinstance(value, int) and value < minimum:
        causes.append(
            Cause(
                f"{prefix}.{key}",
                f"Invalid value: {value}: must be greater than or equal to {minimum}",
            )
        )


def _is_extended(resource: str) -> bool:
    return (
        "/" in resource
        and not resource.startswith("kubernetes.io/")
        and not resource.startswith("requests.")
        and not resource.startswith("hugepages-")
    )


def pod_spec_causes(spec: dict[str, Any], prefix: str) -> list[Cause]:
    causes: list[Cause] = []
    containers = spec.get("containers")
    if not containers:
        return [Cause(f"{prefix}.containers", "Required value", "FieldValueRequired")]
    seen: set[str] = set()
    for i, c in enumerate(containers):
        path = f"{prefix}.containers[{i}]"
        name = c.get("name") or ""
        if not name:
            causes.append(Cause(f"{path}.name", "Required value", "FieldValueRequired"))
        elif not DNS1123_LABEL.match(name):
            causes.append(Cause(f"{path}.name", f"Invalid value: {go_value(name)}: {LABEL_MSG}"))
        elif name in seen:
            causes.append(
                Cause(f"{path}.name", f"Duplicate value: {go_value(name)}", "FieldValueDuplicate")
            )
        seen.add(name)
        if not c.get("image"):
            causes.append(Cause(f"{path}.image", "Required value", "FieldValueRequired"))
        causes.extend(_resource_causes(c.get("resources") or {}, f"{path}.resources"))
    policy = spec.get("restartPolicy")
    if policy not in (None, "Always", "OnFailure", "Never"):
        causes.append(
            Cause(
                f"{prefix}.restartPolicy",
                f"Unsupported value: {go_value(policy)}: "
                'supported values: "Always", "OnFailure", "Never"',
                "FieldValueNotSupported",
            )
        )
    return causes


def _resource_causes(res: dict[str, Any], path: str) -> list[Cause]:
    causes: list[Cause] = []
    parsed: dict[str, dict[str, Any]] = {"limits": {}, "requests": {}}
    for kind in ("limits", "requests"):
        for name, raw in (res.get(kind) or {}).items():
            field = f"{path}.{kind}[{name}]"
            try:
                amount = quantity.parse(raw)
            except ValueError:
                causes.append(
                    Cause(
                        field,
                        f"Invalid value: {go_value(raw)}: quantities must "
                        "match the regular expression "
                        "'^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'",
                    )
                )
                continue
            if amount < 0:
                causes.append(
                    Cause(
                        field, f"Invalid value: {go_value(raw)}: must be greater than or equal to 0"
                    )
                )
            if _is_extended(name) and amount != amount.to_integral_value():
                causes.append(
                    Cause(
                        field,
                        f"Invalid value: {go_value(quantity.format_quantity(amount))}"
                        ": must be an integer",
                    )
                )
            parsed[kind][name] = amount
    for name, amount in parsed["requests"].items():
        limit = parsed["limits"].get(name)
        if _is_extended(name):
            if limit is None:
                causes.append(
                    Cause(
                        f"{path}.limits",
                        "Required value: Limit must be set for non overcommitable resources",
                        "FieldValueRequired",
                    )
                )
            elif limit != amount:
                causes.append(
                    Cause(
                        f"{path}.requests",
                        f"Invalid value: "
                        f"{go_value(quantity.format_quantity(amount))}: must be equal "
                        f"to {name} limit of {quantity.format_quantity(limit)}",
                    )
                )
        elif limit is not None and amount > limit:
            causes.append(
                Cause(
                    f"{path}.requests",
                    f"Invalid value: "
                    f"{go_value(str((res.get('requests') or {})[name]))}: must be less "
                    f"than or equal to {name} limit of "
                    f"{(res.get('limits') or {})[name]}",
                )
            )
    return causes


def validate_object(
    rt: ResourceType, obj: dict[str, Any], old: dict[str, Any] | None = None
) -> None:
    """Raise 422 for the checks a real API server makes on the defaulted object: its name,
    then the checks of its kind."""
    meta = obj.get("metadata") or {}
    causes = _name_causes(rt, meta)
    spec = obj.get("spec") or {}
    if rt.plural == "pods":
        causes += pod_spec_causes(spec, "spec")
    elif rt.plural == "jobs":
        causes += _job_causes(spec, old)
    elif rt.plural in ("deployments", "replicasets"):
        causes += _replicated_causes(spec)
    elif rt.plural == "priorityclasses":
        causes += _priority_class_causes(obj, old)
    elif rt.plural == "resourcequotas":
        causes += _quota_causes(spec)
    if causes:
        raise invalid(rt.kind, rt.group, meta.get("name") or meta.get("generateName", ""), causes)


def _job_causes(spec: dict[str, Any], old: dict[str, Any] | None) -> list[Cause]:
    """batch/v1 Job: counts, completion mode, the pod template and its restart policy, and
    what may not change after creation."""
    causes: list[Cause] = []
    for key in ("parallelism", "completions", "backoffLimit"):
        _nonneg(causes, spec, key, "spec")
    _nonneg(causes, spec, "activeDeadlineSeconds", "spec", 1)
    _nonneg(causes, spec, "ttlSecondsAfterFinished", "spec")
    if spec.get("completionMode") == "Indexed" and spec.get("completions") is None:
        causes.append(
            Cause(
                "spec.completions",
                "Required value: when completion mode is Indexed",
                "FieldValueRequired",
            )
        )
    if spec.get("completionMode") not in (None, "Indexed", "NonIndexed"):
        causes.append(
            Cause(
                "spec.completionMode",
                f"Unsupported value: "
                f"{go_value(spec.get('completionMode'))}: supported values: "
                '"NonIndexed", "Indexed"',
                "FieldValueNotSupported",
            )
        )
    tspec = (spec.get("template") or {}).get("spec") or {}
    causes += pod_spec_causes(tspec, "spec.template.spec")
    policy = tspec.get("restartPolicy")
    if policy not in ("OnFailure", "Never"):
        causes.append(
            Cause(
                "spec.template.spec.restartPolicy",
                f"Unsupported value: "
                f"{go_value(policy or 'Always')}: supported values: "
                '"OnFailure", "Never"',
                "FieldValueNotSupported",
            )
        )
    if old is not None and _template_changed(old, spec):
        causes.append(
            Cause("spec.template", "Invalid value: core.PodTemplateSpec{...}: field is immutable")
        )
    if old is not None and old.get("spec", {}).get("completionMode") != spec.get("completionMode"):
        causes.append(
            Cause(
                "spec.completionMode",
                f"Invalid value: {go_value(spec.get('completionMode'))}: field is immutable",
            )
        )
    return causes


# What a suspended Job's template may change (scheduling directives: Kueue sets them when it
# starts a Job and puts them back when it evicts one).
_SCHEDULING_DIRECTIVES = ("nodeSelector", "tolerations", "affinity", "schedulingGates")


def _template_changed(old: dict[str, Any], spec: dict[str, Any]) -> bool:
    """Whether a Job's pod template changed where it may not: anywhere, unless the Job is
    (or was) suspended, then beyond its labels, annotations and scheduling directives."""
    before, after = old.get("spec", {}).get("template"), spec.get("template")
    if before == after:
        return False
    if not (old.get("spec", {}).get("suspend") or spec.get("suspend")):
        return True

    def fixed(template: Any) -> Any:
        template = dict(template or {})
        template.pop("metadata", None)
        pod = dict(template.get("spec") or {})
        for key in _SCHEDULING_DIRECTIVES:
            pod.pop(key, None)
        template["spec"] = pod
        return template

    return bool(fixed(before) != fixed(after))


def _replicated_causes(spec: dict[str, Any]) -> list[Cause]:
    """Deployments and ReplicaSets: replicas, a selector that matches the template's
    labels, the pod template, and restartPolicy Always."""
    causes: list[Cause] = []
    _nonneg(causes, spec, "replicas", "spec")
    selector = spec.get("selector")
    labels = ((spec.get("template") or {}).get("metadata") or {}).get("labels") or {}
    if not selector:
        causes.append(Cause("spec.selector", "Required value", "FieldValueRequired"))
    elif not match_label_selector_obj(selector, labels):
        shown = ", ".join(f'"{k}":"{v}"' for k, v in sorted(labels.items()))
        causes.append(
            Cause(
                "spec.template.metadata.labels",
                f"Invalid value: "
                f"map[string]string{{{shown}}}: `selector` does not match "
                "template `labels`",
            )
        )
    tspec = (spec.get("template") or {}).get("spec") or {}
    causes += pod_spec_causes(tspec, "spec.template.spec")
    if tspec.get("restartPolicy") not in (None, "Always"):
        causes.append(
            Cause(
                "spec.template.spec.restartPolicy",
                f"Unsupported value: "
                f"{go_value(tspec.get('restartPolicy'))}: supported values: "
                '"Always"',
                "FieldValueNotSupported",
            )
        )
    return causes


def _priority_class_causes(obj: dict[str, Any], old: dict[str, Any] | None) -> list[Cause]:
    """PriorityClasses: the reserved ``system-`` names, the user-defined maximum, the
    preemption policy, and a value that never changes."""
    causes: list[Cause] = []
    name = (obj.get("metadata") or {}).get("name", "")
    if name.startswith("system-") and name not in (
        "system-cluster-critical",
        "system-node-critical",
    ):
        causes.append(
            Cause(
                "metadata.name",
                f"Invalid value: {go_value(name)}: priority "
                "class names with 'system-' prefix are reserved",
            )
        )
    value = obj.get("value")
    if isinstance(value, int) and value > 1_000_000_000 and not name.startswith("system-"):
        causes.append(
            Cause(
                "value",
                f"Invalid value: {value}: maximum allowed value of a "
                "user defined priority is 1000000000",
            )
        )
    if obj.get("preemptionPolicy") not in (None, "PreemptLowerPriority", "Never"):
        causes.append(
            Cause(
                "preemptionPolicy",
                f"Unsupported value: "
                f"{go_value(obj.get('preemptionPolicy'))}: supported values: "
                '"Never", "PreemptLowerPriority"',
                "FieldValueNotSupported",
            )
        )
    if old is not None and old.get("value") != obj.get("value"):
        causes.append(Cause("value", f"Invalid value: {value}: field is immutable"))
    return causes


def _quota_causes(spec: dict[str, Any]) -> list[Cause]:
    """ResourceQuotas: every hard limit a quantity."""
    causes: list[Cause] = []
    for name, raw in (spec.get("hard") or {}).items():
        try:
            quantity.parse(raw)
        except ValueError:
            causes.append(
                Cause(
                    f"spec.hard[{name}]",
                    f"Invalid value: {go_value(raw)}: "
                    "quantities must match the regular expression "
                    "'^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'",
                )
            )
    return causes
