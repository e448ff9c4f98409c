"""Single sign-on with any OpenID Connect provider (Keycloak, Okta, Entra ID, Google, Dex…).

Authlib's Django client does the protocol: discovery from ``OIDC_ISSUER``, the
authorization-code flow with PKCE (S256), ``state`` and ``nonce`` kept in the session and
checked once, and the ID token's signature (the provider's JWKS), issuer, audience, expiry
and nonce verified. Why Authlib: it discovers the endpoints from the issuer alone (one
setting, as the provider's documentation gives it), and it has PKCE and nonce built in;
mozilla-django-oidc wants every endpoint configured by hand.

This module then finds or creates the user by (issuer, subject), makes their memberships
follow their groups (``teams.services.memberships_from_groups``) and logs them in; someone
whose groups map to nothing gets a page saying whom to ask, and no session.
"""

from __future__ import annotations

import functools
import logging
import re
from typing import Any
from urllib.parse import urlencode

from authlib.common.errors import AuthlibBaseError
from authlib.integrations.django_client import OAuth
from django.conf import settings
from django.contrib.auth import login, logout
from django.contrib.auth import views as auth_views
from django.contrib.auth.forms import AuthenticationForm
from django.contrib.auth.models import User
from django.core.exceptions import ValidationError
from django.db import transaction
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import redirect, render, resolve_url
from django.urls import reverse
from django.utils import timezone
from django.utils.http import url_has_allowed_host_and_scheme
from django.views.decorators.http import require_GET, require_POST
from joserfc.errors import JoseError

from teams.models import SsoIdentity
from teams.services import memberships_from_groups

logger = logging.getLogger(__name__)

ID_TOKEN_KEY = "sso_id_token"  # noqa: S105 - the name of a session key, not a secret
NEXT_KEY = "sso_next"


def sso_enabled() -> bool:
    return bool(settings.OIDC_ISSUER)


@functools.lru_cache(maxsize=4)
def _client_for(issuer: str, client_id: str, secret: str, scopes: str) -> Any:
    registry = OAuth()
    registry.register(
        "oidc",
        client_id=client_id,
        client_secret=secret,
        server_metadata_url=f"{issuer.rstrip('/')}/.well-known/openid-configuration",
        client_kwargs={"scope": scopes, "code_challenge_method": "S256"},
    )
    return registry.oidc


def oidc_client() -> Any:
    """The provider's client (its metadata and keys are fetched on first use, then kept)."""
    return _client_for(
        settings.OIDC_ISSUER,
        settings.OIDC_CLIENT_ID,
        settings.OIDC_CLIENT_SECRET,
        " ".join(settings.OIDC_SCOPES),
    )


def _failed(request: HttpRequest, reason: str, status: int = 400) -> HttpResponse:
    logger.warning("single sign-on refused: %s", reason)
    return render(request, "registration/sso_failed.html", {"reason": reason}, status=status)


@require_GET
def sso_login(request: HttpRequest) -> HttpResponse:
    """Off to the provider (state, nonce and the PKCE verifier stay in the session)."""
    if not sso_enabled():
        return redirect("login")
    target = request.GET.get("next", "")
    if target and url_has_allowed_host_and_scheme(target, {request.get_host()}):
        request.session[NEXT_KEY] = target
    callback = request.build_absolute_uri(reverse("sso-callback"))
    try:
        response: HttpResponse = oidc_client().authorize_redirect(request, callback)
    except Exception as exc:  # noqa: BLE001 - the provider's discovery failed: say so
        return _failed(request, f"the identity provider could not be reached ({exc})", 503)
    return response


def _username(claims: dict[str, Any]) -> str:
    """A free username from the preferred one (or the email's local part, or the subject)."""
    wanted = str(
        claims.get("preferred_username") or str(claims.get("email", "")).split("@")[0] or "user"
    )
    base = re.sub(r"[^\w.@+-]", "-", wanted)[:140] or "user"
    name, n = base, 1
    while User.objects.filter(username=name).exists():
        n += 1
        name = f"{base}-{n}"
    return name


@transaction.atomic
def _user_for(claims: dict[str, Any]) -> User:
    identity = (
        SsoIdentity.objects.select_for_update()
        .select_related("user")
        .filter(issuer=claims["iss"], subject=claims["sub"])
        .first()
    )
    if identity is None:
        # No password given: an unusable one, so this user signs on through the provider only.
        user = User.objects.create_user(username=_username(claims))
        identity = SsoIdentity.objects.create(
            user=user, issuer=claims["iss"], subject=claims["sub"]
        )
    user = identity.user
    user.email = str(claims.get("email") or user.email)
    user.first_name = str(claims.get("given_name") or user.first_name)[:150]
    user.last_name = str(claims.get("family_name") or user.last_name)[:150]
    user.save(update_fields=["email", "first_name", "last_name"])
    groups = claims.get(settings.OIDC_GROUPS_CLAIM) or []
    identity.groups = [str(g) for g in groups] if isinstance(groups, list) else [str(groups)]
    identity.last_login = timezone.now()
    identity.save(update_fields=["groups", "last_login"])
    return user


@require_GET
def sso_callback(request: HttpRequest) -> HttpResponse:
    """Back from the provider: check everything, then sign the user in (or say why not)."""
    if not sso_enabled():
        return redirect("login")
    if "error" in request.GET:
        return _failed(request, f"the identity provider said: {request.GET.get('error')}")
    try:
        token = oidc_client().authorize_access_token(request)
    except AuthlibBaseError as exc:
        # A replayed or forged state, a code already used: nothing is signed in.
        return _failed(request, exc.description or exc.error or str(exc))
    except JoseError as exc:
        # An ID token whose signature, audience, issuer, expiry or nonce is wrong.
        return _failed(request, f"the ID token was refused ({exc.error}: {exc.description})")
    claims = dict(token.get("userinfo") or {})
    if not claims.get("sub"):
        return _failed(request, "the ID token names no subject")
    user = _user_for(claims)
    identity = user.sso_identity
    synced = memberships_from_groups(user=user, groups=identity.groups)
    if not synced.teams and not synced.platform_admin:
        return render(
            request,
            "registration/sso_no_team.html",
            {
                "user_name": user.get_username(),
                "groups": identity.groups,
                "contact": settings.OIDC_SUPPORT_CONTACT,
            },
            status=403,
        )
    target = request.session.pop(NEXT_KEY, "") or resolve_url(settings.LOGIN_REDIRECT_URL)
    login(request, user, backend="django.contrib.auth.backends.ModelBackend")
    request.session[ID_TOKEN_KEY] = token.get("id_token", "")
    if synced.changes:
        logger.info("sign-on of %s: %s", user.get_username(), "; ".join(synced.changes))
    return HttpResponseRedirect(target)


@require_POST
def sso_logout(request: HttpRequest) -> HttpResponse:
    """End the portal's session; for a single sign-on session, also the provider's
    (RP-initiated logout) when it offers an end-session endpoint."""
    id_token = request.session.get(ID_TOKEN_KEY, "")
    logout(request)
    back = request.build_absolute_uri(reverse("login"))
    if id_token and sso_enabled():
        try:
            end = oidc_client().load_server_metadata().get("end_session_endpoint")
        except Exception:  # noqa: BLE001 - the provider is away: the portal's session is over
            end = None
        if end:
            query = urlencode({"id_token_hint": id_token, "post_logout_redirect_uri": back})
            return HttpResponseRedirect(f"{end}?{query}")
    return HttpResponseRedirect(back)


class PasswordLoginForm(AuthenticationForm):
    """Django's login form, refused as a whole when ``LOCAL_LOGIN_ENABLED`` is off."""

    def clean(self) -> dict[str, Any]:
        if not settings.LOCAL_LOGIN_ENABLED:
            raise ValidationError(
                "Password sign-in is switched off here: use single sign-on.", code="disabled"
            )
        return super().clean()


class LoginView(auth_views.LoginView):
    """The login page: single sign-on when configured, passwords while they are on."""

    form_class = PasswordLoginForm

    def get_context_data(self, **kwargs: Any) -> dict[str, Any]:
        context = super().get_context_data(**kwargs)
        context["sso_enabled"] = sso_enabled()
        context["sso_name"] = settings.OIDC_DISPLAY_NAME
        context["local_login"] = settings.LOCAL_LOGIN_ENABLED
        return context
