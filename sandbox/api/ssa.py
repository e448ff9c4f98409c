"""Server-side apply's field ownership: ``metadata.managedFields``, and conflicts between
field managers as the API server reports them.

Each write records which fields its manager set: an apply (``application/apply-patch+yaml``
with ``fieldManager``) owns exactly the fields of its configuration; any other write
(create, update, patch) takes ownership of the fields whose values it changed, under the
request's ``fieldManager`` or its User-Agent's first word, as the API server names it. An
apply that would change a field another manager owns is refused with 409 ``Conflict``
(``Apply failed with 1 conflict: conflict with "kubectl-edit" using apps/v1: .spec.replicas``)
unless it is forced (``force=true``: ownership moves to it). Applying the same value shares
ownership. A field its manager applied before and applies no more is removed, unless
another manager owns it.

Simplified against the real structured-merge-diff: lists of objects are keyed by ``name``
(containers, ports, env, volumes); other lists are owned whole; the merge itself stays the
JSON merge of ``sandbox.api.patch``.
"""

from __future__ import annotations

import json
from typing import Any

from sandbox.errors import ApiError

Obj = dict[str, Any]
Path = tuple[str, ...]  # "f:spec", "f:replicas", 'k:{"name":"web"}', "." (the item itself)
IGNORED_TOP = {"apiVersion", "kind", "status"}
OWNED_METADATA = {"labels", "annotations"}


def field_set(obj: Obj) -> set[Path]:
    """The paths of the fields an object (or an apply configuration) sets."""
    out: set[Path] = set()
    for key, value in obj.items():
        if key in IGNORED_TOP:
            continue
        if key == "metadata":
            for meta_key in OWNED_METADATA & set(value or {}):
                _walk(value[meta_key], ("f:metadata", f"f:{meta_key}"), out)
            continue
        _walk(value, (f"f:{key}",), out)
    return out


def _walk(value: Any, path: Path, out: set[Path]) -> None:
    if isinstance(value, dict) and value:
        for key, sub in value.items():
            _walk(sub, (*path, f"f:{key}"), out)
    elif (
        isinstance(value, list)
        and value
        and all(isinstance(item, dict) and "name" in item for item in value)
    ):
        for item in value:
            item_path = (*path, _item_key(item["name"]))
            out.add((*item_path, "."))
            for key, sub in item.items():
                _walk(sub, (*item_path, f"f:{key}"), out)
    else:
        out.add(path)


def _item_key(name: Any) -> str:
    return "k:" + json.dumps({"name": name}, separators=(",", ":"))


def _get(obj: Any, path: Path) -> Any:
    """The value at ``path`` in ``obj`` (``_MISSING`` when absent)."""
    node = obj
    for part in path:
        if part == ".":
            return node
        if part.startswith("k:"):
            name = json.loads(part[2:])["name"]
            if not isinstance(node, list):
                return _MISSING
            node = next(
                (i for i in node if isinstance(i, dict) and i.get("name") == name), _MISSING
            )
        else:
            if not isinstance(node, dict) or part[2:] not in node:
                return _MISSING
            node = node[part[2:]]
        if node is _MISSING:
            return _MISSING
    return node


def _remove(obj: Obj, path: Path) -> None:
    if path[-1] == ".":
        parent, key = _get(obj, path[:-2]), path[-2]
        if isinstance(parent, list):
            name = json.loads(key[2:])["name"]
            parent[:] = [i for i in parent if not (isinstance(i, dict) and i.get("name") == name)]
        return
    parent = _get(obj, path[:-1])
    if isinstance(parent, dict):
        parent.pop(path[-1][2:], None)


class _Missing:
    pass


_MISSING = _Missing()


def to_fields_v1(paths: set[Path]) -> Obj:
    root: Obj = {}
    for path in sorted(paths):
        node = root
        for part in path:
            node = node.setdefault(part, {})
    return root


def from_fields_v1(fields: Obj, prefix: Path = ()) -> set[Path]:
    """The paths a ``fieldsV1`` tree names: its leaves (an item's ``.`` is a leaf)."""
    out: set[Path] = set()
    for key, sub in (fields or {}).items():
        path = (*prefix, key)
        if sub:
            out |= from_fields_v1(sub, path)
        else:
            out.add(path)
    return out


def _text(path: Path) -> str:
    parts = []
    for part in path:
        if part == ".":
            continue
        if part.startswith("k:"):
            parts.append(f"[name={json.loads(part[2:])['name']}]")
        else:
            parts.append(f".{part[2:]}")
    return "".join(parts)


def _entries(obj: Obj) -> list[Obj]:
    return list((obj.get("metadata") or {}).get("managedFields") or [])


def apply(
    old: Obj | None, new: Obj, config: Obj, *, manager: str, force: bool, api_version: str, ts: str
) -> list[Obj]:
    """The ``managedFields`` after ``manager`` applies ``config`` (``new`` is the merged
    object; fields it no longer applies are removed from it here). Raises the API
    server's 409 on conflicts unless ``force``."""
    applied = field_set(config)
    entries = _entries(old) if old else []
    conflicts: dict[str, list[Path]] = {}
    previous: set[Path] = set()
    for entry in entries:
        owned = from_fields_v1(entry.get("fieldsV1") or {})
        if entry.get("manager") == manager and entry.get("operation") == "Apply":
            previous = owned
            continue
        for path in sorted(applied & owned):
            if path[-1] == ".":
                continue
            before = _get(old, path) if old else _MISSING
            if before is not _MISSING and before != _get(config, path):
                conflicts.setdefault(str(entry.get("manager")), []).append(path)
    if conflicts and not force:
        raise _conflict(conflicts, api_version)
    others: set[Path] = set()
    kept: list[Obj] = []
    for entry in entries:
        if entry.get("manager") == manager and entry.get("operation") == "Apply":
            continue
        owned = from_fields_v1(entry.get("fieldsV1") or {})
        lost = {p for paths in conflicts.values() for p in paths} if force else set()
        owned -= lost
        others |= owned
        if owned:
            kept.append({**entry, "fieldsV1": to_fields_v1(owned)})
    for path in sorted(previous - applied - others, key=len, reverse=True):
        _remove(new, path)
    kept.append(
        {
            "manager": manager,
            "operation": "Apply",
            "apiVersion": api_version,
            "time": ts,
            "fieldsType": "FieldsV1",
            "fieldsV1": to_fields_v1(applied),
        }
    )
    return kept


def update(old: Obj | None, new: Obj, *, manager: str, api_version: str, ts: str) -> list[Obj]:
    """The ``managedFields`` after a create, update or patch by ``manager``: it takes the
    fields whose values changed (all it set, on a create)."""
    after = field_set(new)
    changed = after if old is None else {p for p in after if _get(old, p) != _get(new, p)}
    entries = _entries(old) if old else []
    kept: list[Obj] = []
    mine: set[Path] = set()
    for entry in entries:
        owned = from_fields_v1(entry.get("fieldsV1") or {}) & after
        if entry.get("manager") == manager and entry.get("operation") == "Update":
            mine = owned
            continue
        owned -= changed
        if owned:
            kept.append({**entry, "fieldsV1": to_fields_v1(owned)})
    mine |= changed
    if mine:
        kept.append(
            {
                "manager": manager,
                "operation": "Update",
                "apiVersion": api_version,
                "time": ts,
                "fieldsType": "FieldsV1",
                "fieldsV1": to_fields_v1(mine),
            }
        )
    return kept


def _conflict(conflicts: dict[str, list[Path]], api_version: str) -> ApiError:
    count = sum(len(paths) for paths in conflicts.values())
    causes = [
        {
            "reason": "FieldManagerConflict",
            "message": f'conflict with "{manager}" using {api_version}',
            "field": _text(path),
        }
        for manager, paths in conflicts.items()
        for path in paths
    ]
    if count == 1:
        cause = causes[0]
        message = f"Apply failed with 1 conflict: {cause['message']}: {cause['field']}"
    else:
        lines = [f"Apply failed with {count} conflicts:"]
        for manager, paths in conflicts.items():
            lines.append(f'conflicts with "{manager}" using {api_version}:')
            lines.extend(f"- {_text(path)}" for path in paths)
        message = "\n".join(lines)
    return ApiError(409, "Conflict", message, {"causes": causes})
