"""Kubernetes ``Status`` error bodies.

Every refusal the API server makes is one ``ApiError`` raised anywhere under a request
and turned into JSON in one place (``server.py``), so the shapes match a real API server's
(docs/references.md).
"""

from __future__ import annotations

from typing import Any


class ApiError(Exception):
    """An API failure that becomes a ``Status`` body with ``code``."""

    def __init__(
        self, code: int, reason: str, message: str, details: dict[str, Any] | None = None
    ) -> None:
        super().__init__(message)
        self.code = code
        self.reason = reason
        self.message = message
        self.details = details

    def status(self) -> dict[str, Any]:
        body: dict[str, Any] = {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
        }
        if self.details is not None:
            body["details"] = self.details
        body["code"] = self.code
        return body


def _details(name: str, group: str, kind: str) -> dict[str, Any]:
    # The core group is spelled by leaving "group" out, as the API server does.
    details: dict[str, Any] = {"name": name}
    if group:
        details["group"] = group
    details["kind"] = kind
    return details


def qualified(plural: str, group: str) -> str:
    """``jobs.batch`` / ``pods``: how resource names appear in messages."""
    return f"{plural}.{group}" if group else plural


def not_found(plural: str, group: str, name: str) -> ApiError:
    return ApiError(
        404,
        "NotFound",
        f'{qualified(plural, group)} "{name}" not found',
        _details(name, group, plural),
    )


def already_exists(plural: str, group: str, name: str) -> ApiError:
    return ApiError(
        409,
        "AlreadyExists",
        f'{qualified(plural, group)} "{name}" already exists',
        _details(name, group, plural),
    )


def conflict(plural: str, group: str, name: str) -> ApiError:
    return ApiError(
        409,
        "Conflict",
        f'Operation cannot be fulfilled on {qualified(plural, group)} "{name}": the object has '
        "been modified; please apply your changes to the latest version and try again",
        _details(name, group, plural),
    )


def forbidden(plural: str, group: str, name: str, why: str) -> ApiError:
    return ApiError(
        403,
        "Forbidden",
        f'{qualified(plural, group)} "{name}" is forbidden: {why}',
        _details(name, group, plural),
    )


def bad_request(message: str) -> ApiError:
    return ApiError(400, "BadRequest", message)


def unauthorized() -> ApiError:
    return ApiError(401, "Unauthorized", "Unauthorized")


def method_not_allowed() -> ApiError:
    return ApiError(
        405, "MethodNotAllowed", "the server does not allow this method on the requested resource"
    )


def expired(message: str) -> ApiError:
    return ApiError(410, "Expired", message)


class Cause:
    """One ``details.causes`` entry of a 422."""

    def __init__(self, field: str, message: str, reason: str = "FieldValueInvalid") -> None:
        self.field = field
        self.message = message
        self.reason = reason

    def text(self) -> str:
        return f"{self.field}: {self.message}" if self.field else self.message


def invalid(kind: str, group: str, name: str, causes: list[Cause]) -> ApiError:
    """422 ``Invalid``: ``Job.batch "x" is invalid: spec.parallelism: Invalid value: …``."""
    what = f"{kind}.{group}" if group else kind
    texts = [c.text() for c in causes]
    joined = texts[0] if len(texts) == 1 else "[" + ", ".join(texts) + "]"
    details: dict[str, Any] = _details(name, group, kind)
    details["causes"] = [
        {"reason": c.reason, "message": c.message, "field": c.field} for c in causes
    ]
    return ApiError(422, "Invalid", f'{what} "{name}" is invalid: {joined}', details)
