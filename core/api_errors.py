"""The one shape of every API error answer, for the apps' API views and the handler.

``ErrorOutput`` is ``{"detail": "…"}`` plus, when input was refused,
``"errors": {"<field path>": ["…"]}``; ``error_responses`` documents it in the OpenAPI
schema; ``flatten_errors`` turns DRF's nested errors into those field paths. The project's
exception handler (``portal.exception_handler``) answers with it.
"""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import OpenApiResponse
from rest_framework import serializers


class ErrorOutput(serializers.Serializer):
    """What every error answer of the API looks like."""

    detail = serializers.CharField(help_text="What went wrong and how to fix it.")
    # The JSON name is fixed; DRF's metaclass moves it out of the attribute it shadows.
    errors = serializers.DictField(  # type: ignore[assignment]
        child=serializers.ListField(child=serializers.CharField()),
        required=False,
        help_text='Refused input, per field path: {"gpu.count": ["…"]}.',
    )


ERROR_DESCRIPTIONS = {
    400: "Refused input: `detail` says why, `errors` names each field and the fix.",
    401: "No valid credentials: send `Authorization: Bearer <token>`.",
    403: "Authenticated, but not allowed to do this.",
    404: "No such object among your teams' (another team's objects are 404 too).",
    409: "The object is not in a state that allows this.",
    413: "The request body is larger than the server accepts.",
    415: "The body is not JSON: send `Content-Type: application/json`.",
    429: "Too many writes: wait the number of seconds in `Retry-After`.",
    503: "A service the answer depends on (the cluster, Prometheus) could not be reached.",
}


def error_responses(*codes: int) -> dict[int, OpenApiResponse]:
    """OpenAPI responses for the given error status codes, all of shape ``ErrorOutput``."""
    return {
        code: OpenApiResponse(ErrorOutput, description=ERROR_DESCRIPTIONS[code]) for code in codes
    }


def flatten_errors(detail: Any, prefix: str = "") -> dict[str, list[str]]:
    """DRF's nested error structure → ``{"gpu.count": [...], "volumes[0].claim": [...]}``."""
    flat: dict[str, list[str]] = {}
    if isinstance(detail, dict):
        for key, value in detail.items():
            if key == "non_field_errors":
                name = prefix
            elif isinstance(key, int) or str(key).isdigit():  # a list item (many=True)
                name = f"{prefix}[{key}]"
            else:
                name = f"{prefix}.{key}" if prefix else str(key)
            for path, messages in flatten_errors(value, name).items():
                flat.setdefault(path, []).extend(messages)
    elif isinstance(detail, list):
        if all(isinstance(item, str) for item in detail):
            flat[prefix or "spec"] = [str(item) for item in detail]
        else:
            for index, item in enumerate(detail):
                for path, messages in flatten_errors(item, f"{prefix}[{index}]").items():
                    flat.setdefault(path, []).extend(messages)
    else:
        flat[prefix or "spec"] = [str(detail)]
    return {path: messages for path, messages in flat.items() if messages}
