"""Single sign-on against a real OpenID Connect provider (node-oidc-provider, run by Node),
in headless Chromium: the login flow, memberships following the provider's groups on
every sign-on, the no-team page, RP-initiated logout, a replayed ``state``, and ID tokens
that are tampered with, for another audience, expired, or for another nonce.
"""

from __future__ import annotations

import json
import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client
from joserfc import jwt
from joserfc.errors import JoseError
from joserfc.jwk import RSAKey
from playwright.sync_api import Browser, Page

from portal.sso import oidc_client
from teams.models import AuditLog, GroupMapping, Membership, SsoIdentity, Team
from tests.browser import chromium
from tests.monitoring.prometheus_process import free_port
from tests.processes import spawn, terminate, wait_ready

pytestmark = pytest.mark.django_db(transaction=True)

REPO = Path(__file__).resolve().parents[2]
PROVIDER_DIR = REPO / "var" / "oidc"
CLIENT_ID = "gpu-portal"
CLIENT_SECRET = "a-test-client-secret-that-is-long-enough"


class Provider:
    def __init__(self, workdir: Path, portal: str) -> None:
        assert (PROVIDER_DIR / "node_modules" / "oidc-provider").exists(), (
            "make test installs node-oidc-provider into var/oidc (scripts/test.sh)"
        )
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.key = RSAKey.generate_key(2048, private=True)
        self.kid = "test-key-1"
        private = {
            **self.key.as_dict(private=True),
            "kid": self.kid,
            "use": "sig",
            "alg": "RS256",
        }
        self.accounts = workdir / "accounts.json"
        self.set_groups({})
        config = {
            "port": self.port,
            "accounts": str(self.accounts),
            "jwks": {"keys": [private]},
            "clients": [
                {
                    "client_id": CLIENT_ID,
                    "client_secret": CLIENT_SECRET,
                    "redirect_uris": [f"{portal}/sso/callback/"],
                    "post_logout_redirect_uris": [f"{portal}/login/"],
                    "grant_types": ["authorization_code"],
                    "response_types": ["code"],
                    "token_endpoint_auth_method": "client_secret_basic",
                }
            ],
        }
        (workdir / "provider.json").write_text(json.dumps(config))
        # ESM resolves `oidc-provider` from the script's folder: run it beside node_modules.
        script = PROVIDER_DIR / "provider.mjs"
        shutil.copy(REPO / "tests" / "oidc" / "provider.mjs", script)
        self.log = workdir / "provider.log"
        self.process = spawn(["node", str(script), str(workdir / "provider.json")], self.log)
        wait_ready(
            self.process,
            lambda: "OIDC PROVIDER READY" in self.log.read_text(errors="replace"),
            what="oidc provider",
            log_file=self.log,
        )

    def set_groups(self, groups: dict[str, list[str]]) -> None:
        self.accounts.write_text(json.dumps({k: {"groups": v} for k, v in groups.items()}))

    def sign(self, **claims: Any) -> str:
        header = {"alg": "RS256", "kid": self.kid}
        return jwt.encode(header, claims, self.key)

    def stop(self) -> None:
        terminate(self.process)


@pytest.fixture(scope="module")
def provider(live_server: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Provider]:
    running = Provider(tmp_path_factory.mktemp("oidc"), live_server.url)
    yield running
    running.stop()


@pytest.fixture
def sso(provider: Provider, settings: Any) -> Provider:
    settings.OIDC_ISSUER = provider.url
    settings.OIDC_CLIENT_ID = CLIENT_ID
    settings.OIDC_CLIENT_SECRET = CLIENT_SECRET
    settings.OIDC_DISPLAY_NAME = "Example IdP"
    settings.OIDC_SUPPORT_CONTACT = "gpu-platform@example.com"
    vision = Team.objects.create(slug="vision", name="Vision", namespace="team-vision")
    nlp = Team.objects.create(slug="nlp", name="NLP", namespace="team-nlp")
    GroupMapping.objects.create(group="ml-vision", team=vision, role="member")
    GroupMapping.objects.create(group="ml-vision-leads", team=vision, role="lead")
    GroupMapping.objects.create(group="ml-nlp", team=nlp, role="member")
    GroupMapping.objects.create(group="gpu-platform-admins", platform_admin=True)
    return provider


@pytest.fixture
def page(monkeypatch: pytest.MonkeyPatch) -> Iterator[Page]:
    browser: Browser
    with chromium(monkeypatch) as browser:
        context = browser.new_context()
        yield context.new_page()
        context.close()


def sign_in(page: Page, base: str, login: str) -> str:
    """The whole browser flow; returns the callback URL the provider sent the browser to."""
    callbacks: list[str] = []
    page.on("request", lambda r: callbacks.append(r.url) if "/sso/callback/" in r.url else None)
    page.goto(f"{base}/login/")
    page.click("text=Sign in with Example IdP")
    if page.locator("input[name=login]").count():  # the provider's own login form
        page.fill("input[name=login]", login)
        page.fill("input[name=password]", "any password")
        page.click("button[type=submit]")
    page.wait_for_load_state("networkidle")
    return callbacks[-1]


def log_out(page: Page, base: str, sso: Provider) -> None:
    """The portal's Log out, then the provider's confirmation, back on the login page."""
    page.goto(f"{base}/jobs/")
    page.click("form.logout button")
    page.wait_for_url(f"{sso.url}/**")  # the provider asks to confirm
    page.click("button[name=logout]")
    page.wait_for_url(f"{base}/login/**")


def test_sign_on_follows_the_providers_groups(sso: Provider, page: Page, live_server: Any) -> None:
    base = live_server.url
    sso.set_groups({"erin": ["ml-vision", "unrelated-group"]})

    # First sign-on: a user is created, member of vision (the unmapped group is ignored).
    callback = sign_in(page, base, "erin")
    assert page.url == f"{base}/jobs/"
    erin = User.objects.get(sso_identity__subject="erin")
    assert erin.email == "erin@example.com" and not erin.has_usable_password()
    assert set(Membership.objects.filter(user=erin).values_list("team__slug", "role")) == {
        ("vision", "member")
    }
    assert AuditLog.objects.filter(action="membership.create", actor=None).count() == 1

    # The same callback again (a replayed state and code): refused, nothing changes.
    replay = page.goto(callback)
    assert replay is not None and replay.status == 400
    assert "Sign-in failed" in page.content()

    # Logout ends the portal's session and the provider's (RP-initiated logout).
    log_out(page, base, sso)
    assert page.goto(f"{base}/jobs/").url.startswith(f"{base}/login/")

    # Later sign-on, new groups: lead of vision, member of nlp, platform admin.
    sso.set_groups({"erin": ["ml-vision-leads", "ml-nlp", "gpu-platform-admins"]})
    sign_in(page, base, "erin")
    erin.refresh_from_db()
    assert set(Membership.objects.filter(user=erin).values_list("team__slug", "role")) == {
        ("vision", "lead"),
        ("nlp", "member"),
    }
    assert erin.is_superuser and erin.is_staff
    assert User.objects.filter(sso_identity__isnull=False).count() == 1  # the same user

    # Groups gone at the provider: memberships removed, and a page saying whom to ask.
    log_out(page, base, sso)
    sso.set_groups({"erin": ["unrelated-group"]})
    sign_in(page, base, "erin")
    assert "You are not in a team yet" in page.content()
    assert "gpu-platform@example.com" in page.content()
    assert not Membership.objects.filter(user=erin).exists()
    erin.refresh_from_db()
    assert not erin.is_superuser
    assert page.goto(f"{base}/jobs/").url.startswith(f"{base}/login/")  # not signed in
    actions = list(AuditLog.objects.filter(actor=None).values_list("action", flat=True))
    assert actions.count("membership.delete") == 2 and "user.platform_admin" in actions


def test_password_login_stays_for_bootstrap_admins_and_can_be_switched_off(
    sso: Provider, settings: Any
) -> None:
    User.objects.create_user(username="root", password="a-long-bootstrap-password")
    form = {"username": "root", "password": "a-long-bootstrap-password"}
    client = Client()
    page = client.get("/login/").content.decode()
    assert "Sign in with Example IdP" in page and 'id="id_password"' in page
    assert client.post("/login/", form).status_code == 302  # signed in with the password
    client.post("/logout/")

    settings.LOCAL_LOGIN_ENABLED = False
    page = client.get("/login/").content.decode()
    assert "Sign in with Example IdP" in page and 'id="id_password"' not in page
    refused = client.post("/login/", form)
    assert refused.status_code == 200
    assert "Password sign-in is switched off here: use single sign-on." in refused.content.decode()
    assert "_auth_user_id" not in client.session


@pytest.mark.parametrize(
    ("change", "refused_because"),
    [
        ("tampered", ("bad_signature",)),
        # Not for this client: aud lacks it (joserfc then asks for the azp claim).
        ("audience", ("aud", "azp")),
        ("expired", ("expired",)),
        ("nonce", ("nonce",)),
    ],
)
def test_id_tokens_the_portal_refuses(
    sso: Provider, change: str, refused_because: tuple[str, ...]
) -> None:
    """The ID-token checks the callback runs (Authlib's, with the provider's real JWKS)."""
    now = int(time.time())
    claims = {
        "iss": sso.url,
        "sub": "mallory",
        "aud": CLIENT_ID,
        "iat": now,
        "exp": now + 300,
        "nonce": "the-nonce",
        "groups": ["ml-vision"],
    }
    client = oidc_client()
    # Control: the genuine token passes.
    good = sso.sign(**claims)
    assert client.parse_id_token({"id_token": good}, nonce="the-nonce")["sub"] == "mallory"
    if change == "tampered":
        head, _, signature = good.split(".")
        forged = {**claims, "groups": ["gpu-platform-admins"]}
        body = jwt.encode({"alg": "RS256"}, forged, sso.key).split(".")[1]
        token, nonce = f"{head}.{body}.{signature}", "the-nonce"
    elif change == "audience":
        token, nonce = sso.sign(**{**claims, "aud": "another-app"}), "the-nonce"
    elif change == "expired":
        token, nonce = sso.sign(**{**claims, "iat": now - 7200, "exp": now - 3600}), "the-nonce"
    else:
        token, nonce = good, "another-nonce"
    with pytest.raises(JoseError) as refused:
        client.parse_id_token({"id_token": token}, nonce=nonce)
    why = f"{refused.value.error} {refused.value.description}".lower()
    assert any(word in why for word in refused_because), why
    assert not SsoIdentity.objects.exists()
