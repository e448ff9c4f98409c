"""The generated OpenAPI schema, made to say what the API enforces.

drf-spectacular describes a ``CharField`` as a plain string, but every ``CharField`` refuses
a NUL character (Django's ``ProhibitNullCharactersValidator``; PostgreSQL cannot store one
either). A client generated from a plain-string schema would send values the API refuses,
so every free-text string a client sends gets a ``pattern`` that excludes NUL.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

# JSON Schema patterns are ECMA-262 regular expressions; Python's ``re`` reads the same.
NO_NUL_PATTERN = "^[^\\u0000]*$"
# Strings whose format or enumeration already rules NUL out.
_CONSTRAINED = ("pattern", "enum", "format", "const")
_COMPONENTS = "#/components/schemas/"


def _nul_free(schema: Any) -> None:
    """Add the pattern to every unconstrained string in ``schema``, at any depth."""
    if isinstance(schema, list):
        for item in schema:
            _nul_free(item)
        return
    if not isinstance(schema, dict):
        return
    if schema.get("type") == "string" and not any(key in schema for key in _CONSTRAINED):
        schema["pattern"] = NO_NUL_PATTERN
    for value in schema.values():
        _nul_free(value)


def _refs(node: Any) -> Iterator[str]:
    """The component names ``node`` refers to (``$ref: #/components/schemas/<name>``)."""
    if isinstance(node, list):
        for item in node:
            yield from _refs(item)
    elif isinstance(node, dict):
        ref = node.get("$ref")
        if isinstance(ref, str) and ref.startswith(_COMPONENTS):
            yield ref.removeprefix(_COMPONENTS)
        for value in node.values():
            yield from _refs(value)


def nul_free_strings(
    result: dict[str, Any], generator: Any, request: Any, public: bool
) -> dict[str, Any]:
    """drf-spectacular postprocessing hook (``POSTPROCESSING_HOOKS``): the pattern on the
    strings a client sends: every operation's parameters and request body, and the
    components they use. Answers are left as they are (an error may quote what was sent)."""
    components = result.get("components", {}).get("schemas", {})
    sent: list[Any] = []
    for operations in result.get("paths", {}).values():
        for operation in operations.values():
            if isinstance(operation, dict):
                sent += [operation.get("parameters", []), operation.get("requestBody", {})]
    _nul_free(sent)
    todo, seen = list(_refs(sent)), set()
    while todo:
        name = todo.pop()
        if name in seen or name not in components:
            continue
        seen.add(name)
        _nul_free(components[name])
        todo += _refs(components[name])
    return result
