"""The portal's one domain error type.

Services raise ``ApplicationError`` with a message a user can act on; the API
exception handler turns it into a 400 (or the given status) and views turn it
into a form error, each in one place.
"""

from __future__ import annotations


class ApplicationError(Exception):
    status_code = 400

    def __init__(
        self,
        message: str,
        *,
        field_errors: dict[str, list[str]] | None = None,
        status_code: int | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.field_errors = field_errors or {}
        if status_code is not None:
            self.status_code = status_code


class NotFound(ApplicationError):
    status_code = 404


class PermissionDenied(ApplicationError):
    status_code = 403


class Conflict(ApplicationError):
    status_code = 409


class ClusterUnavailable(ApplicationError):
    """The cluster could not be read: say so plainly (503) instead of failing the request."""

    status_code = 503
