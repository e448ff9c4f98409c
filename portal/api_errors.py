"""Turn ``ApplicationError`` into an HTTP response, in one place."""

from __future__ import annotations

from typing import Any

from rest_framework.response import Response
from rest_framework.views import exception_handler as drf_exception_handler

from portal.errors import ApplicationError


def exception_handler(exc: Exception, context: dict[str, Any]) -> Response | None:
    if isinstance(exc, ApplicationError):
        body: dict[str, Any] = {"detail": exc.message}
        if exc.field_errors:
            body["errors"] = exc.field_errors
        return Response(body, status=exc.status_code)
    return drf_exception_handler(exc, context)
