"""``/openapi/v3`` and ``/openapi/v2``: the API's schemas, as ``kubectl apply``'s client-side
validation and ``kubectl explain`` read them.

Generated, not written: the definitions are those kubernetes-validate ships for the
sandbox's Kubernetes version (the same files the sandbox validates requests against),
turned from JSON Schema into OpenAPI (``$defs`` → ``components/schemas`` or
``definitions``; a ``["string", "null"]`` type → ``string``). Each definition keeps its
``x-kubernetes-group-version-kind``, which is how kubectl finds a kind's schema.

The v3 root lists one document per group-version the sandbox serves, each named by a hash
of its content (kubectl caches them by that URL, as it does with a real server).
"""

from __future__ import annotations

import functools
import hashlib
import json
from importlib import resources
from typing import Any

from kubernetes_validate.utils import all_versions, major_minor

from sandbox.api import crds
from sandbox.api.discovery import VERSION
from sandbox.api.resources import RESOURCES

SCHEMA_VERSION = "1.33"


@functools.cache
def _definitions() -> dict[str, Any]:
    version = [v for v in all_versions() if major_minor(v) <= SCHEMA_VERSION][-1]
    path = resources.files("kubernetes_validate").joinpath(
        f"kubernetes-json-schema/v{version}-local/_definitions.json"
    )
    defs: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))["$defs"]
    return defs


def _convert(node: Any, prefix: str) -> Any:
    if isinstance(node, list):
        return [_convert(item, prefix) for item in node]
    if not isinstance(node, dict):
        return node
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key == "$ref" and isinstance(value, str):
            out[key] = prefix + value.removeprefix("#/$defs/")
        elif key == "type" and isinstance(value, list):
            kinds = [v for v in value if v != "null"]
            if len(kinds) == 1:
                out[key] = kinds[0]
            elif kinds:
                out[key] = kinds
        elif key in ("properties", "patternProperties", "$defs"):
            out[key] = {name: _convert(sub, prefix) for name, sub in value.items()}
        else:
            out[key] = _convert(value, prefix)
    return out


@functools.cache
def _builtin_schemas(prefix: str) -> dict[str, Any]:
    return {name: _convert(schema, prefix) for name, schema in _definitions().items()}


def _custom_name(group: str, version: str, kind: str) -> str:
    """apiextensions' name for a custom kind's schema: the group reversed
    (``kueue.x-k8s.io`` → ``io.x-k8s.kueue.v1beta2.ClusterQueue``)."""
    return ".".join([*reversed(group.split(".")), version, kind])


def _schemas(prefix: str) -> dict[str, Any]:
    """Every kind's schema: the built-in ones, and each served CRD version's, whose
    ``metadata`` is the ObjectMeta every object has."""
    schemas = dict(_builtin_schemas(prefix))
    meta = prefix + "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"
    for found in crds.SERVED.values():
        rt = found.rt
        schema = dict(found.schema)
        properties = dict(schema.get("properties") or {})
        properties["metadata"] = {"$ref": meta}
        schema["properties"] = properties
        schema["x-kubernetes-group-version-kind"] = [
            {"group": rt.group, "version": rt.version, "kind": rt.kind}
        ]
        schemas[_custom_name(rt.group, rt.version, rt.kind)] = schema
    return schemas


def _group_versions() -> list[str]:
    seen: dict[str, None] = {}
    for r in RESOURCES:
        seen[f"apis/{r.group}/{r.version}" if r.group else f"api/{r.version}"] = None
    return list(seen)


def _info() -> dict[str, str]:
    return {"title": "Kubernetes", "version": str(VERSION["gitVersion"])}


def _schema_name(group: str, version: str, kind: str) -> str | None:
    for found in crds.SERVED.values():
        if (found.rt.group, found.rt.version, found.rt.kind) == (group, version, kind):
            return _custom_name(group, version, kind)
    for name, schema in _definitions().items():
        for gvk in schema.get("x-kubernetes-group-version-kind") or []:
            if (gvk.get("group"), gvk.get("version"), gvk.get("kind")) == (group, version, kind):
                return name
    return None


_QUERY = ("dryRun", "fieldManager", "fieldValidation", "pretty")


def _operation(action: str, gvk: dict[str, str], ref: str, params: tuple[str, ...]) -> Any:
    return {
        "operationId": f"{action}{gvk['kind']}",
        "x-kubernetes-action": action,
        "x-kubernetes-group-version-kind": gvk,
        "parameters": [
            {"name": name, "in": "query", "schema": {"type": "string", "uniqueItems": True}}
            for name in params
        ],
        "responses": {"200": {"content": {"application/json": {"schema": {"$ref": ref}}}}},
    }


def _paths(group_version: str, prefix: str) -> dict[str, Any]:
    """The resources' paths, with the operations kubectl reads: which kinds are served
    where, and that PATCH and POST take ``fieldValidation`` (so ``kubectl apply`` leaves
    validation to the server, as with a real one)."""
    paths: dict[str, Any] = {}
    for r in RESOURCES:
        gv = f"apis/{r.group}/{r.version}" if r.group else f"api/{r.version}"
        name = _schema_name(r.group, r.version, r.kind)
        if gv != group_version or name is None:
            continue
        gvk = {"group": r.group, "version": r.version, "kind": r.kind}
        ref = prefix + name
        base = f"/{gv}/namespaces/{{namespace}}/{r.plural}" if r.namespaced else f"/{gv}/{r.plural}"
        paths[base] = {
            "get": _operation("list", gvk, ref, ("labelSelector", "fieldSelector", "limit")),
            "post": _operation("post", gvk, ref, _QUERY),
        }
        paths[f"{base}/{{name}}"] = {
            "get": _operation("get", gvk, ref, ("pretty",)),
            "put": _operation("put", gvk, ref, _QUERY),
            "patch": _operation("patch", gvk, ref, (*_QUERY, "force")),
            "delete": _operation("delete", gvk, ref, ("dryRun", "propagationPolicy")),
        }
    return paths


def v3_document(group_version: str) -> bytes | None:
    """The OpenAPI v3 document of ``api/v1`` or ``apis/<group>/<version>``, as JSON bytes
    (built again when the CRDs served change)."""
    return _v3_document(group_version, crds.generation())


@functools.cache
def _v3_document(group_version: str, served: int) -> bytes | None:
    if group_version not in _group_versions():
        return None
    prefix = "#/components/schemas/"
    doc = {
        "openapi": "3.0.0",
        "info": _info(),
        "paths": _paths(group_version, prefix),
        "components": {"schemas": _schemas(prefix)},
    }
    return json.dumps(doc, separators=(",", ":")).encode()


def _hash(group_version: str) -> str:
    body = v3_document(group_version) or b""
    return hashlib.sha512(body).hexdigest()[:128].upper()


def v3_root() -> dict[str, Any]:
    return _v3_root(crds.generation())


@functools.cache
def _v3_root(served: int) -> dict[str, Any]:
    return {
        "paths": {
            gv: {"serverRelativeURL": f"/openapi/v3/{gv}?hash={_hash(gv)}"}
            for gv in _group_versions()
        }
    }


def v2_document() -> bytes:
    return _v2_document(crds.generation())


@functools.cache
def _v2_document(served: int) -> bytes:
    doc = {
        "swagger": "2.0",
        "info": _info(),
        "paths": {},
        "definitions": _schemas("#/definitions/"),
    }
    return json.dumps(doc, separators=(",", ":")).encode()


def document(path: str) -> bytes | dict[str, Any] | None:
    """What ``GET <path>`` answers under ``/openapi``, or None when there is no such
    document."""
    if path == "/openapi/v2":
        return v2_document()
    if path == "/openapi/v3":
        return v3_root()
    if path.startswith("/openapi/v3/"):
        return v3_document(path.removeprefix("/openapi/v3/"))
    return None
