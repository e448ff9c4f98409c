"""The project's own endpoints: liveness and readiness, and the user's API tokens."""

from __future__ import annotations

import logging

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.contrib.auth.models import User
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.templatetags.static import static
from django.utils import timezone
from django.views.decorators.http import require_GET

from portal.models import ApiToken
from portal.services import api_token_create, api_token_revoke

logger = logging.getLogger(__name__)


@login_required
def api_tokens(request: HttpRequest) -> HttpResponse:
    """The user's API tokens (for scripts and ``gpuportal login``): create one, shown once;
    list them by prefix; revoke one."""
    user: User = request.user  # type: ignore[assignment]
    created = None
    if request.method == "POST":
        if "revoke" in request.POST:
            token = ApiToken.objects.filter(user=user, pk=request.POST.get("revoke") or 0).first()
            if token is None:
                messages.error(request, "No such token of yours.")
            else:
                api_token_revoke(token=token, actor=user)
                messages.success(request, f"Token {token.prefix}… revoked.")
            return redirect("api-tokens")
        description = (request.POST.get("description") or "").strip()[:100]
        _, created = api_token_create(user=user, description=description or "created on the web")
    tokens = ApiToken.objects.filter(user=user).order_by("-created_at")
    return render(
        request,
        "portal/tokens.html",
        {
            "tokens": tokens,
            "created": created,
            "now": timezone.now(),
            "url": request.build_absolute_uri("/").rstrip("/"),
        },
    )


@require_GET
def favicon(request: HttpRequest) -> HttpResponse:
    """``/favicon.ico``, which a browser asks for on a page that names no icon: the portal's."""
    return redirect(static("favicon.svg"))
