"""The OpenAPI schema says what the API enforces about strings: no NUL character (every
``CharField`` refuses one), so a client generated from the schema never sends a value the
API refuses for it."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import yaml
from django.test import Client

from tests.conftest import api_client_for


def _strings(node: Any, where: str = "") -> Iterator[tuple[str, dict[str, Any]]]:
    if isinstance(node, list):
        for n, item in enumerate(node):
            yield from _strings(item, f"{where}[{n}]")
    elif isinstance(node, dict):
        if node.get("type") == "string":
            yield where, node
        for key, value in node.items():
            yield from _strings(value, f"{where}.{key}")


def _sent(schema: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    """The strings of every operation's parameters and request body, through the
    components they refer to."""
    components = schema["components"]["schemas"]
    for path, operations in schema["paths"].items():
        for method, operation in operations.items():
            for where, node in (
                ("parameters", operation.get("parameters", [])),
                ("body", operation.get("requestBody", {})),
            ):
                yield from _strings(_resolved(node, components), f"{method} {path} {where}")


def _resolved(node: Any, components: dict[str, Any], depth: int = 0) -> Any:
    if depth > 20:
        return node
    if isinstance(node, list):
        return [_resolved(item, components, depth + 1) for item in node]
    if isinstance(node, dict):
        ref = node.get("$ref", "")
        if ref.startswith("#/components/schemas/"):
            return _resolved(components[ref.split("/")[-1]], components, depth + 1)
        return {key: _resolved(value, components, depth + 1) for key, value in node.items()}
    return node


def test_every_free_text_string_a_client_sends_excludes_nul(db: Any) -> None:
    # Given the schema the app serves
    schema = yaml.safe_load(Client().get("/api/schema/").content)

    # Then every string of a parameter or request body is an enumeration, has a format,
    # or has a pattern, and every pattern refuses a NUL character
    found = list(_sent(schema))
    assert len(found) > 50
    loose = [where for where, s in found if not {"enum", "format", "pattern"} & set(s)]
    assert loose == []
    for where, string in found:
        if "pattern" in string:
            assert not re.search(string["pattern"], "a\x00b"), where


def test_the_schema_and_the_api_agree_about_a_team_channels_target(demo: Any) -> None:
    # Given the request body the schema documents for a team's notification channels
    schema = yaml.safe_load(Client().get("/api/schema/").content)
    body = schema["components"]["schemas"]["ChannelInputRequest"]["properties"]["target"]
    # When bob (vision's lead) sends a target with a NUL character
    response = api_client_for(demo["users"]["bob"]).put(
        "/api/v1/teams/vision/notifications/",
        {"channels": [{"channel": "webhook", "target": "https://hooks.example.com/\x00"}]},
        format="json",
    )
    # Then the API refuses it, naming the field, and the schema's pattern refuses it too
    assert response.status_code == 400
    assert any("target" in field for field in response.json()["errors"])
    assert not re.search(body["pattern"], "https://hooks.example.com/\x00")
