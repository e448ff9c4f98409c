"""The portal works offline: API schema and docs, every script and stylesheet served locally."""

from __future__ import annotations

import filecmp
import re
from importlib.resources import files
from typing import Any

import pytest
import yaml
from django.conf import settings
from django.contrib.auth.models import User
from django.contrib.staticfiles import finders
from django.template import Context, Template
from django.test import Client

from cluster import kube
from monitoring import prometheus

pytestmark = pytest.mark.django_db

ASSET_RE = re.compile(r'<(?:script|link)\b[^>]*\b(?:src|href)="([^"]+)"', re.I)
REMOTE_ASSET_RE = re.compile(
    r'<script\b[^>]*\bsrc="(?:https?:)?//|<link\b[^>]*\bhref="(?:https?:)?//', re.I
)


def local_assets(page: str) -> list[str]:
    """Static paths of the page's scripts and stylesheets (``/static/x.js`` → ``x.js``)."""
    prefix = "/" + settings.STATIC_URL.lstrip("/")
    return [url.removeprefix(prefix) for url in ASSET_RE.findall(page) if url.startswith(prefix)]


def test_openapi_schema_lists_the_api(client: Client, alice: User) -> None:
    # Given a logged-in user
    client.force_login(alice)
    # When they fetch the API schema
    response = client.get("/api/schema/")
    # Then it is an OpenAPI 3 document with every endpoint of the API
    assert response.status_code == 200
    schema = yaml.safe_load(response.content)
    assert schema["openapi"].startswith("3.")
    assert {
        "/api/v1/jobs/",
        "/api/v1/jobs/{job_id}/",
        "/api/v1/jobs/{job_id}/manifest/",
        "/api/v1/jobs/preview/",
        "/api/v1/jobs/{job_id}/cancel/",
        "/api/v1/teams/",
    } <= set(schema["paths"])
    assert "post" in schema["paths"]["/api/v1/jobs/"]


def test_api_docs_load_no_remote_assets(client: Client, alice: User) -> None:
    # Given a logged-in user
    client.force_login(alice)
    # When they open the API docs
    response = client.get("/api/docs/")
    page = response.content.decode()
    # Then Swagger UI comes from the installed sidecar package, not a CDN
    assert response.status_code == 200
    assert not REMOTE_ASSET_RE.search(page), REMOTE_ASSET_RE.search(page)
    assets = local_assets(page)
    assert any(a.startswith("drf_spectacular_sidecar/swagger-ui-dist/") for a in assets), assets
    for asset in assets:
        assert finders.find(asset), asset


@pytest.mark.parametrize("path", ["/jobs/", "/jobs/new/", "/login/"])
def test_pages_load_only_local_assets(
    client: Client, demo: dict[str, Any], alice: User, path: str
) -> None:
    # Given alice (logged in, except for the login page)
    if path != "/login/":
        client.force_login(alice)
    # When she opens the page
    response = client.get(path)
    page = response.content.decode()
    # Then no script or stylesheet comes from another host, and every one is a real file
    assert response.status_code == 200
    assert not REMOTE_ASSET_RE.search(page), REMOTE_ASSET_RE.search(page)
    assets = local_assets(page)
    assert assets
    for asset in assets:
        assert finders.find(asset), asset


def test_htmx_script_is_served_locally() -> None:
    # Given the htmx tag base.html uses
    base = (settings.BASE_DIR / "templates" / "base.html").read_text()
    assert "{% htmx_script %}" in base
    # When it renders
    html = Template("{% load django_htmx %}{% htmx_script %}").render(Context())
    # Then it loads htmx from static files that exist
    assets = local_assets(html)
    assert any(re.search(r"htmx[^/]*\.js$", a) for a in assets), html
    for asset in assets:
        assert finders.find(asset), asset


def test_plotly_js_is_the_installed_plotly_package_file() -> None:
    # Given the installed plotly package
    shipped = files("plotly") / "package_data" / "plotly.min.js"
    # When static files look for plotly/plotly.min.js
    found = finders.find("plotly/plotly.min.js")
    # Then it is that package's file
    assert found
    assert filecmp.cmp(str(found), str(shipped), shallow=False)


def test_healthz_reports_ok(client: Client) -> None:
    # Given a running portal with its database
    # When a load balancer probes it (no login)
    response = client.get("/healthz")
    # Then it answers ok
    assert response.status_code == 200
    assert response.json() == {"status": "ok"}


def test_readyz_needs_the_database_and_redis_and_reports_the_rest(
    client: Client, settings: Any, caplog: pytest.LogCaptureFixture
) -> None:
    # Given the database and Redis, but no cluster and no Prometheus
    settings.KUBECONFIG = "/nonexistent/kubeconfig"
    settings.PROMETHEUS_URL = "http://127.0.0.1:9"
    settings.READY_CHECK_TIMEOUT = 0.5
    prometheus.reset_client()
    kube.reset_client()
    # When a probe asks (no login): ready, the two missing ones reported, no details
    ready = client.get("/readyz")
    assert ready.status_code == 200
    checks = ready.json()["checks"]
    assert {k: v["ok"] for k, v in checks.items()} == {
        "database": True,
        "redis": True,
        "cluster": False,
        "prometheus": False,
    }
    assert "error" not in checks["prometheus"]
    # Redis gone: not ready; why is in the log, not in the answer
    settings.REDIS_URL = "redis://127.0.0.1:9/0"
    not_ready = client.get("/readyz")
    assert not_ready.status_code == 503
    body = not_ready.json()
    assert body["status"] == "error" and body["checks"]["database"]["ok"]
    assert "127.0.0.1:9" not in not_ready.content.decode()
    assert "readyz: redis: Error 111 connecting to 127.0.0.1:9" in caplog.text


def test_probes_answer_by_pod_ip_over_plain_http_in_production(
    client: Client, settings: Any
) -> None:
    # A kubelet probes the pod's IP (not an allowed host) over HTTP (production redirects)
    settings.ALLOWED_HOSTS = ["portal.example.com"]
    settings.SECURE_SSL_REDIRECT = True
    assert client.get("/healthz", HTTP_HOST="10.1.2.3:8000").status_code == 200
    assert client.get("/readyz", HTTP_HOST="10.1.2.3:8000").status_code in (200, 503)
    # Every other path still refuses the unknown host
    assert client.get("/login/", HTTP_HOST="10.1.2.3:8000").status_code == 400
