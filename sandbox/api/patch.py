"""PATCH bodies: JSON merge patch, strategic merge patch and JSON patch."""

from __future__ import annotations

import copy
from typing import Any

from sandbox.errors import bad_request

# Lists the strategic merge patch merges element-wise, by the key named here
# (``x-kubernetes-patch-merge-key`` in the OpenAPI schema); every other list is replaced.
MERGE_KEYS = {
    "containers": "name",
    "initContainers": "name",
    "env": "name",
    "volumes": "name",
    "volumeMounts": "mountPath",
    "ports": "containerPort",
    "imagePullSecrets": "name",
    "conditions": "type",
    "ownerReferences": "uid",
}


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386: objects merge recursively, ``null`` deletes, anything else replaces."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = copy.deepcopy(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


def strategic_merge_patch(target: Any, patch: Any, field: str = "") -> Any:
    if isinstance(patch, list):
        key = MERGE_KEYS.get(field)
        if key is None or not isinstance(target, list):
            return copy.deepcopy(patch)
        merged = copy.deepcopy(target)
        for item in patch:
            if not isinstance(item, dict) or key not in item:
                merged.append(copy.deepcopy(item))
                continue
            index = next(
                (
                    i
                    for i, old in enumerate(merged)
                    if isinstance(old, dict) and old.get(key) == item[key]
                ),
                None,
            )
            if item.get("$patch") == "delete":
                if index is not None:
                    merged.pop(index)
            elif index is None:
                merged.append(copy.deepcopy(item))
            else:
                merged[index] = strategic_merge_patch(merged[index], item)
        return merged
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = copy.deepcopy(target) if isinstance(target, dict) else {}
    for k, value in patch.items():
        if k.startswith("$"):
            continue
        if value is None:
            result.pop(k, None)
        else:
            result[k] = strategic_merge_patch(result.get(k), value, k)
    return result


def _pointer(path: str) -> list[str]:
    if not path.startswith("/"):
        raise bad_request(
            f"the server rejected our request due to an error in our request: invalid path {path!r}"
        )
    return [p.replace("~1", "/").replace("~0", "~") for p in path[1:].split("/")]


def json_patch(target: Any, ops: Any) -> Any:
    """RFC 6902 ``add``/``remove``/``replace``/``test``/``copy``/``move``."""
    if not isinstance(ops, list):
        raise bad_request("json: cannot unmarshal object into Go value of type jsonpatch.Patch")
    doc = copy.deepcopy(target)

    def walk(parts: list[str]) -> tuple[Any, str]:
        holder = doc
        for part in parts[:-1]:
            holder = holder[int(part)] if isinstance(holder, list) else holder[part]
        return holder, parts[-1]

    try:
        for op in ops:
            kind = op.get("op")
            parts = _pointer(op.get("path", ""))
            if kind in ("copy", "move"):
                src_holder, src_key = walk(_pointer(op["from"]))
                value = copy.deepcopy(
                    src_holder[int(src_key)]
                    if isinstance(src_holder, list)
                    else src_holder[src_key]
                )
                if kind == "move":
                    del src_holder[int(src_key) if isinstance(src_holder, list) else src_key]
                op = {"op": "add", "path": op["path"], "value": value}
                kind = "add"
            holder, key = walk(parts)
            if kind == "add":
                if isinstance(holder, list):
                    holder.insert(len(holder) if key == "-" else int(key), op.get("value"))
                else:
                    holder[key] = op.get("value")
            elif kind == "replace":
                if isinstance(holder, list):
                    holder[int(key)] = op.get("value")
                else:
                    if key not in holder:
                        raise KeyError(key)
                    holder[key] = op.get("value")
            elif kind == "remove":
                del holder[int(key) if isinstance(holder, list) else key]
            elif kind == "test":
                current = holder[int(key)] if isinstance(holder, list) else holder[key]
                if current != op.get("value"):
                    raise bad_request(
                        f"the server rejected our request due to an error in our "
                        f"request: testing value {op.get('path')} failed"
                    )
            else:
                raise bad_request(f"Unexpected kind: {kind}")
    except (KeyError, IndexError, ValueError, TypeError) as exc:
        raise bad_request(
            f"the server rejected our request due to an error in our request: {exc}"
        ) from None
    return doc
