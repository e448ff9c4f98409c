"""The probes' short cut, and security headers Django's SecurityMiddleware does not set."""

from __future__ import annotations

from collections.abc import Callable
from urllib.parse import urlsplit

from django.conf import settings
from django.http import Http404, HttpRequest, HttpResponse

from core.errors import NotFound
from portal import probes


class ProbeMiddleware:
    """``GET /healthz`` and ``/readyz`` answered before anything else looks at the request.

    Kubernetes probes a pod by its IP (a Host no ``ALLOWED_HOSTS`` lists) over plain HTTP
    (which production would redirect to HTTPS): both would fail a healthy pod. The probes
    need neither a session nor a user, and say nothing but ok or not.
    """

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        if request.method in ("GET", "HEAD"):
            if request.path == "/healthz":
                return probes.healthz(request)
            if request.path == "/readyz":
                return probes.readyz(request)
        return self.get_response(request)


def content_security_policy() -> str:
    """``CONTENT_SECURITY_POLICY``, with the identity provider allowed as a form's target:
    browsers apply ``form-action`` to a form's redirects too, and Log out (a POST) ends at
    the provider's end-session endpoint."""
    policy = str(settings.CONTENT_SECURITY_POLICY)
    if settings.OIDC_ISSUER:
        parts = urlsplit(settings.OIDC_ISSUER)
        origin = f"{parts.scheme}://{parts.netloc}"
        policy = policy.replace("form-action 'self'", f"form-action 'self' {origin}")
    return policy


class SecurityHeadersMiddleware:
    """Content-Security-Policy without inline scripts, plus isolation headers."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        response = self.get_response(request)
        response.headers.setdefault("Content-Security-Policy", content_security_policy())
        response.headers.setdefault("Cross-Origin-Opener-Policy", "same-origin")
        response.headers.setdefault(
            "Permissions-Policy", "camera=(), microphone=(), geolocation=(), payment=()"
        )
        return response


class NotFoundMiddleware:
    """Pages: the domain's ``NotFound`` (another team's job or team) is a plain 404.

    Selectors raise ``core.errors.NotFound``; the API's exception handler turns it into a
    JSON 404 and this turns it into the site's 404 page, so no view needs its own wrapper.
    """

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        return self.get_response(request)

    def process_exception(self, request: HttpRequest, exception: Exception) -> None:
        if isinstance(exception, NotFound):
            raise Http404(exception.message) from exception
