"""The API's content negotiation (``REST_FRAMEWORK["DEFAULT_CONTENT_NEGOTIATION_CLASS"]``):
a module of its own, since DRF's views import it while they load."""

from __future__ import annotations

from collections.abc import Iterable

from rest_framework.negotiation import DefaultContentNegotiation
from rest_framework.renderers import BaseRenderer
from rest_framework.request import Request


class BlankAcceptNegotiation(DefaultContentNegotiation):
    """An ``Accept`` header without a media type (``Accept:``, ``Accept: ;``) is read as no
    header at all, any type: the client gets JSON, not a 406 (DRF reads the empty value as
    "nothing is acceptable"; the API fuzz sent one)."""

    def select_renderer(
        self,
        request: Request,
        renderers: Iterable[BaseRenderer],
        format_suffix: str | None = None,
    ) -> tuple[BaseRenderer, str]:
        header = request.META.get("HTTP_ACCEPT")
        if header is not None and not header.strip(" \t,;"):
            first = next(iter(renderers))
            return first, first.media_type
        return super().select_renderer(request, renderers, format_suffix)
