"""Turn ``ApplicationError`` into an HTTP response, in one place.

Every error answer of the API has one shape, ``core.api_errors.ErrorOutput``:
``{"detail": "…"}`` plus, when input was refused, ``"errors": {"<field path>": ["…"]}``.
DRF's own validation errors are reshaped to match.

Also the two ways a hostile request body gets past DRF's own error handling, so that
they are a clear 4xx in JSON instead of an HTML page or a 500:

- a body over ``DATA_UPLOAD_MAX_MEMORY_SIZE`` (Django raises ``RequestDataTooBig``);
- JSON nested so deeply that the decoder exhausts the recursion limit.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.exceptions import RequestDataTooBig
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.views.decorators.csrf import csrf_exempt
from django.views.defaults import page_not_found
from rest_framework import status
from rest_framework.exceptions import ValidationError
from rest_framework.response import Response
from rest_framework.views import exception_handler as drf_exception_handler

from core.api_errors import flatten_errors
from core.errors import ApplicationError


def exception_handler(exc: Exception, context: dict[str, Any]) -> Response | None:
    if isinstance(exc, ApplicationError):
        body: dict[str, Any] = {"detail": exc.message}
        if exc.field_errors:
            body["errors"] = exc.field_errors
        return Response(body, status=exc.status_code)
    if isinstance(exc, RequestDataTooBig):
        limit_kib = settings.DATA_UPLOAD_MAX_MEMORY_SIZE // 1024
        return Response(
            {"detail": f"The request body is too large: at most {limit_kib} KiB."},
            status=status.HTTP_413_REQUEST_ENTITY_TOO_LARGE,
        )
    if isinstance(exc, RecursionError) and _raised_while_parsing(exc):
        return Response(
            {"detail": "JSON parse error - the body is nested too deeply to read."},
            status=status.HTTP_400_BAD_REQUEST,
        )
    response = drf_exception_handler(exc, context)
    if isinstance(exc, ValidationError) and response is not None:
        response.data = _validation_error_body(exc.detail)
    return response


def _validation_error_body(detail: Any) -> dict[str, Any]:
    """DRF's ``{"tail": ["…"]}`` → ``{"detail": "tail: …", "errors": {"tail": ["…"]}}``."""
    errors = flatten_errors(detail)
    if not errors:
        return {"detail": "Invalid input."}
    field, messages = next(iter(errors.items()))
    return {"detail": f"{field}: {messages[0]}", "errors": errors}


def _raised_while_parsing(exc: BaseException) -> bool:
    """Whether ``exc`` came out of a DRF request parser (and not from a bug elsewhere)."""
    frame = exc.__traceback__
    while frame is not None:
        if frame.tb_frame.f_globals.get("__name__") == "rest_framework.parsers":
            return True
        frame = frame.tb_next
    return False


@csrf_exempt  # it changes nothing, and a POST to no operation must get the JSON 404 too
def api_not_found(request: HttpRequest, path: str = "") -> JsonResponse:
    """Any path under ``/api/`` that no operation matches (``/api/v1/jobs/null,null/``):
    the documented JSON error, with DEBUG on as with it off (Django's debug 404 page is
    HTML, and ``handler404`` is not used while DEBUG is on)."""
    return JsonResponse({"detail": "Not found."}, status=404)


def not_found(request: HttpRequest, exception: Exception) -> HttpResponse:
    """The site's 404 (``handler404``): JSON under ``/api/``, the usual page elsewhere.

    A URL no route matches (``/api/v1/jobs/abc/``) never reaches DRF; an API client
    must still get the documented ``ErrorOutput``, not an HTML page.
    """
    if request.path.startswith("/api/"):
        return JsonResponse({"detail": "Not found."}, status=404)
    return page_not_found(request, exception)
