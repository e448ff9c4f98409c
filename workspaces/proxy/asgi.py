"""The workspace proxy's ASGI entry point: ``uvicorn workspaces.proxy.asgi:application``."""

import os

import django

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")
django.setup()

from django.conf import settings  # noqa: E402 - after django.setup(): the app reads models

from workspaces.proxy.app import WorkspaceProxy  # noqa: E402

application = WorkspaceProxy(
    upstream=settings.WORKSPACE_PROXY_UPSTREAM,
    session_cookie=settings.SESSION_COOKIE_NAME,
    portal_cookies=frozenset({settings.SESSION_COOKIE_NAME, settings.CSRF_COOKIE_NAME}),
)
