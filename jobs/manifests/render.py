"""Manifests as the multi-document YAML a user previews and an admin can apply."""

from __future__ import annotations

from typing import Any

import yaml

# Keys that read best first, in this order, wherever they occur; every other
# key keeps the order the builder gave it (never alphabetical: `kind` after
# `spec` would hide what the object is).
_LEADING_KEYS = (
    "apiVersion", "kind", "metadata", "name", "namespace", "labels", "image", "command", "args",
    "spec",
)  # fmt: skip


class _ManifestDumper(yaml.SafeDumper):
    """Block style, indented lists, no anchors/aliases for repeated sub-objects."""

    def ignore_aliases(self, data: Any) -> bool:
        return True

    def increase_indent(self, flow: bool = False, indentless: bool = False) -> None:
        # kubectl-style: list items indented under their key.
        super().increase_indent(flow, False)


def to_yaml(manifests: list[dict[str, Any]]) -> str:
    """``---``-separated YAML documents, one per manifest, in the given order."""
    return yaml.dump_all(
        [_ordered(manifest) for manifest in manifests],
        Dumper=_ManifestDumper,
        explicit_start=True,
        sort_keys=False,
        default_flow_style=False,
        allow_unicode=True,
        width=1_000_000,  # never fold long commands or args over lines
    )


def _ordered(value: Any) -> Any:
    if isinstance(value, dict):
        leading = [key for key in _LEADING_KEYS if key in value]
        rest = [key for key in value if key not in _LEADING_KEYS]
        return {key: _ordered(value[key]) for key in leading + rest}
    if isinstance(value, (list, tuple)):
        return [_ordered(item) for item in value]
    return value
