"""CustomResourceDefinitions, served as kube-apiserver's apiextensions serves them.

A CRD (``apiextensions.k8s.io/v1``) is stored like any object; each version it serves
becomes a resource type of the sandbox at once: in discovery (with its short names and
categories), in the OpenAPI documents (its schema under the reversed group's name, with
``x-kubernetes-group-version-kind``, so ``kubectl explain`` reads it), in tables (its
``additionalPrinterColumns``, evaluated as JSONPath), with its ``status`` subresource. A
custom object is checked against the version's ``openAPIV3Schema`` as a structural schema:
unknown fields are pruned (warned of, or refused with ``fieldValidation=Strict``), defaults
applied, then types, enums, bounds, patterns and required fields checked, with the
apiextensions validator's words.

Simplified: CEL rules (``x-kubernetes-validations``) are not evaluated; there are no
conversion webhooks (every served version has the same schema and stored objects keep the
version they were written in).
"""

from __future__ import annotations

import copy
import re
from dataclasses import dataclass
from typing import Any

from sandbox.api import resources
from sandbox.api.resources import ResourceType
from sandbox.errors import Cause, bad_request, invalid

CRD_KEY = "customresourcedefinitions.apiextensions.k8s.io"
Obj = dict[str, Any]


@dataclass(frozen=True)
class Served:
    """One served version of a CRD."""

    rt: ResourceType
    schema: Obj  # the version's openAPIV3Schema
    columns: tuple[Obj, ...]  # additionalPrinterColumns


SERVED: dict[str, Served] = {}  # by the resource type's key, e.g. clusterqueues.kueue.x-k8s.io
_generation = [0]  # bumps when the served set changes: the OpenAPI documents are rebuilt


def generation() -> int:
    return _generation[0]


def served(rt: ResourceType) -> Served | None:
    return SERVED.get(rt.key)


def register(crd: Obj) -> None:
    """Serve every version ``crd`` marks ``served`` (replacing what it served before)."""
    unregister(crd)
    spec = crd.get("spec") or {}
    names = spec.get("names") or {}
    for version in spec.get("versions") or []:
        if not version.get("served", True):
            continue
        rt = ResourceType(
            plural=names["plural"],
            singular=names.get("singular") or names["kind"].lower(),
            kind=names["kind"],
            group=spec["group"],
            version=version["name"],
            namespaced=spec.get("scope", "Namespaced") == "Namespaced",
            short_names=tuple(names.get("shortNames") or ()),
            subresources=("status",) if "status" in (version.get("subresources") or {}) else (),
            categories=tuple(names.get("categories") or ()),
        )
        schema = (version.get("schema") or {}).get("openAPIV3Schema") or {"type": "object"}
        if version.get("storage", False) or rt.key not in SERVED:
            SERVED[rt.key] = Served(
                rt, schema, tuple(version.get("additionalPrinterColumns") or ())
            )
        resources.register(rt)
    _generation[0] += 1


def load(stored: list[Obj]) -> None:
    """Serve the CRDs a restarted sandbox finds in its state file."""
    for crd in stored:
        register(crd)


def unregister(crd: Obj) -> None:
    spec = crd.get("spec") or {}
    names = spec.get("names") or {}
    key = f"{names.get('plural')}.{spec.get('group')}"
    SERVED.pop(key, None)
    resources.unregister(key)
    _generation[0] += 1


def accepted(crd: Obj, now: str) -> None:
    """The status a real API server writes once it serves a CRD's names."""
    spec = crd.get("spec") or {}
    storage = [v["name"] for v in spec.get("versions") or [] if v.get("storage")]
    crd["status"] = {
        "acceptedNames": dict(spec.get("names") or {}),
        "storedVersions": storage,
        "conditions": [
            {
                "type": "NamesAccepted",
                "status": "True",
                "lastTransitionTime": now,
                "reason": "NoConflicts",
                "message": "no conflicts found",
            },
            {
                "type": "Established",
                "status": "True",
                "lastTransitionTime": now,
                "reason": "InitialNamesAccepted",
                "message": "the initial names have been accepted",
            },
        ],
    }


# -- checking a custom object ----------------------------------------------------------------
def check(rt: ResourceType, obj: Obj, field_validation: str) -> list[str]:
    """Prune, default and validate ``obj`` in place against its version's schema; return
    the ``Warning`` header texts. Raises 400 (strict unknown field) or 422 ``Invalid``."""
    found = SERVED.get(rt.key)
    if found is None:
        return []
    unknown: list[str] = []
    for key in list(obj):
        if key in ("apiVersion", "kind", "metadata"):
            continue
        schema = (found.schema.get("properties") or {}).get(key)
        if schema is None and not _keeps_unknown(found.schema):
            unknown.append(key)
            obj.pop(key)
        elif schema is not None:
            obj[key] = _pruned(schema, obj[key], key, unknown)
    if unknown and field_validation == "Strict":
        fields = ", ".join(f'unknown field "{u}"' for u in unknown)
        raise bad_request(f"strict decoding error: {fields}")
    warnings = [] if field_validation == "Ignore" else [f'unknown field "{u}"' for u in unknown]
    _defaulted(found.schema, obj)
    causes: list[Cause] = []
    for key, schema in (found.schema.get("properties") or {}).items():
        if key in ("apiVersion", "kind", "metadata"):
            continue
        if key in obj:
            _validate(schema, obj[key], key, causes)
        elif key in (found.schema.get("required") or []):
            causes.append(Cause(key, "Required value", "FieldValueRequired"))
    if causes:
        name = (obj.get("metadata") or {}).get("name", "")
        raise invalid(rt.kind, rt.group, name, causes)
    return warnings


def _keeps_unknown(schema: Obj) -> bool:
    return bool(schema.get("x-kubernetes-preserve-unknown-fields"))


def _pruned(schema: Obj, value: Any, path: str, unknown: list[str]) -> Any:
    """``value`` without the fields its schema does not declare (recorded in ``unknown``)."""
    if isinstance(value, dict) and schema.get("type") == "object":
        properties = schema.get("properties")
        extra = schema.get("additionalProperties")
        for key in list(value):
            sub = f"{path}.{key}"
            if properties is not None and key in properties:
                value[key] = _pruned(properties[key], value[key], sub, unknown)
            elif isinstance(extra, dict):
                value[key] = _pruned(extra, value[key], sub, unknown)
            elif extra is True or _keeps_unknown(schema) or (properties is None and not extra):
                continue
            else:
                unknown.append(sub)
                value.pop(key)
    elif isinstance(value, list) and isinstance(schema.get("items"), dict):
        return [_pruned(schema["items"], v, f"{path}[{n}]", unknown) for n, v in enumerate(value)]
    return value


def _defaulted(schema: Obj, value: Any) -> None:
    """Apply the schema's ``default`` values to fields that are absent, at every depth."""
    if isinstance(value, dict):
        for key, sub in (schema.get("properties") or {}).items():
            if key not in value and "default" in sub:
                value[key] = copy.deepcopy(sub["default"])
            if key in value:
                _defaulted(sub, value[key])
        extra = schema.get("additionalProperties")
        if isinstance(extra, dict):
            for key in value:
                if key not in (schema.get("properties") or {}):
                    _defaulted(extra, value[key])
    elif isinstance(value, list) and isinstance(schema.get("items"), dict):
        for item in value:
            _defaulted(schema["items"], item)


_TYPES: dict[str, type | tuple[type, ...]] = {
    "object": dict,
    "array": list,
    "string": str,
    "boolean": bool,
    "integer": int,
    "number": (int, float),
}


def _type_name(value: Any) -> str:
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        # go-openapi's rule: a JSON number with no fraction is an integer (2.0, as Python
        # clients send whole quantities, passes an integer or int-or-string field).
        return "integer" if value.is_integer() else "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, dict):
        return "object"
    return "array" if isinstance(value, list) else "null"


def _shown(value: Any) -> str:
    if isinstance(value, str):
        return f'"{value}"'
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _validate(schema: Obj, value: Any, path: str, causes: list[Cause]) -> None:
    """apiextensions' checks of one value, with its words (``… in body must be …``)."""
    if value is None:
        if not schema.get("nullable"):
            causes.append(Cause(path, f"Invalid value: \"null\": {path} in body must be of type "
                                      f"{schema.get('type', 'object')}: \"null\""))  # fmt: skip
        return
    if schema.get("x-kubernetes-int-or-string"):
        if _type_name(value) not in ("integer", "string"):
            causes.append(
                Cause(
                    path,
                    f'Invalid value: "{_type_name(value)}": {path} in body must be of type '
                    f'integer-or-string: "{_type_name(value)}"',
                )
            )
            return
    elif "type" in schema:
        wanted, actual = schema["type"], _type_name(value)
        ok = wanted not in _TYPES or actual == wanted or (wanted, actual) == ("number", "integer")
        if not ok:
            causes.append(
                Cause(
                    path,
                    f'Invalid value: "{actual}": {path} in body must be of type {wanted}: '
                    f'"{actual}"',
                )
            )
            return
    _bounds(schema, value, path, causes)
    if isinstance(value, dict):
        properties = schema.get("properties") or {}
        for key in schema.get("required") or []:
            if key not in value:
                causes.append(Cause(f"{path}.{key}", "Required value", "FieldValueRequired"))
        extra = schema.get("additionalProperties")
        for key, item in value.items():
            if key in properties:
                _validate(properties[key], item, f"{path}.{key}", causes)
            elif isinstance(extra, dict):
                _validate(extra, item, f"{path}.{key}", causes)
    elif isinstance(value, list) and isinstance(schema.get("items"), dict):
        for n, item in enumerate(value):
            _validate(schema["items"], item, f"{path}[{n}]", causes)


def _bounds(schema: Obj, value: Any, path: str, causes: list[Cause]) -> None:
    if "enum" in schema and value not in schema["enum"]:
        allowed = ", ".join(_shown(v) for v in schema["enum"])
        causes.append(
            Cause(
                path,
                f"Unsupported value: {_shown(value)}: supported values: {allowed}",
                "FieldValueNotSupported",
            )
        )
    if isinstance(value, int | float) and not isinstance(value, bool):
        if "minimum" in schema and value < schema["minimum"]:
            causes.append(
                Cause(
                    path,
                    f"Invalid value: {value}: {path} in body should be greater than or equal "
                    f"to {schema['minimum']}",
                )
            )
        if "maximum" in schema and value > schema["maximum"]:
            causes.append(
                Cause(
                    path,
                    f"Invalid value: {value}: {path} in body should be less than or equal to "
                    f"{schema['maximum']}",
                )
            )
    if isinstance(value, str):
        if "maxLength" in schema and len(value) > schema["maxLength"]:
            causes.append(
                Cause(
                    path,
                    f"Too long: may not be more than {schema['maxLength']} bytes",
                    "FieldValueTooLong",
                )
            )
        if "minLength" in schema and len(value) < schema["minLength"]:
            causes.append(
                Cause(
                    path,
                    f"Invalid value: {_shown(value)}: {path} in body should be at least "
                    f"{schema['minLength']} chars long",
                )
            )
        if "pattern" in schema and not re.search(schema["pattern"], value):
            causes.append(
                Cause(
                    path,
                    f"Invalid value: {_shown(value)}: {path} in body should match "
                    f"'{schema['pattern']}'",
                )
            )
    if isinstance(value, list):
        if "maxItems" in schema and len(value) > schema["maxItems"]:
            causes.append(
                Cause(
                    path,
                    f"Too many: {len(value)}: must have at most {schema['maxItems']} items",
                    "FieldValueTooMany",
                )
            )
        if "minItems" in schema and len(value) < schema["minItems"]:
            causes.append(
                Cause(
                    path,
                    f"Invalid value: {len(value)}: {path} in body should have at least "
                    f"{schema['minItems']} items",
                )
            )


# -- tables ------------------------------------------------------------------------------------
_SEGMENT = re.compile(
    r"\.([A-Za-z0-9_\-/]+)|\[(\d+|\*)\]|\[\?\(@\.([A-Za-z0-9_.]+)==[\"']([^\"']*)[\"']\)\]"
    r"|\[(-?\d*):(-?\d*)\]"
)


def json_path(obj: Any, path: str) -> list[Any]:
    """What a printer column's JSONPath finds in ``obj`` (the subset CRDs use: fields,
    ``[n]``, ``[*]``, slices such as ``[-1:]`` and ``[?(@.field=="value")]`` filters)."""
    current = [obj]
    pos = 0
    path = path.strip()
    while pos < len(path):
        match = _SEGMENT.match(path, pos)
        if match is None:
            return []
        pos = match.end()
        field, index, filter_key, filter_value, start, stop = match.groups()
        nxt: list[Any] = []
        for value in current:
            if start is not None and isinstance(value, list):
                nxt.extend(value[int(start) if start else None : int(stop) if stop else None])
            elif field is not None and isinstance(value, dict) and field in value:
                nxt.append(value[field])
            elif index is not None and isinstance(value, list):
                if index == "*":
                    nxt.extend(value)
                elif int(index) < len(value):
                    nxt.append(value[int(index)])
            elif filter_key is not None and isinstance(value, list):
                for item in value:
                    probe: Any = item
                    for part in filter_key.split("."):
                        probe = probe.get(part) if isinstance(probe, dict) else None
                    if probe is not None and str(probe) == filter_value:
                        nxt.append(item)
        current = nxt
    return current


def columns(found: Served) -> list[tuple[str, str, str, int]]:
    """The table's columns: the name, then the CRD's printer columns (Age when it has none)."""
    if not found.columns:
        return [("Name", "string", "name", 0), ("Age", "date", "", 0)]
    return [("Name", "string", "name", 0)] + [
        (c["name"], c.get("type", "string"), c.get("format", ""), int(c.get("priority", 0)))
        for c in found.columns
    ]


def cells(found: Served, obj: Obj) -> list[Any]:
    row: list[Any] = [obj["metadata"]["name"]]
    if not found.columns:
        return [*row, obj["metadata"].get("creationTimestamp", "")]
    for column in found.columns:
        values = json_path(obj, column["jsonPath"])
        row.append(values[0] if values else None)
    return row
