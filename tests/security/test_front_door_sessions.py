"""The front door keeps every visitor themselves: the workspace proxy in front of gunicorn,
exactly as ``make run`` starts them, asked with curl as a first-time browser asks.

The defect these reproduce: the proxy forwarded through one HTTP client whose cookie jar
kept the ``sessionid`` of the first user to sign in, and added it to every later request
that came without a ``Cookie`` header, so a new visitor, a token client and a health probe
were all served as that user. A test client built on httpx did not show it; curl, which
sends exactly what it is told, did every time.
"""

from __future__ import annotations

import html
import re
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings as django_settings
from django.contrib.auth.models import User

from portal.services import api_token_create
from tests.integration.conftest import _database_url
from tests.processes import http_ok, spawn, tail, terminate, wait_ready
from tests.proxy_process import ProxyProcess, free_port

REPO = Path(__file__).resolve().parents[2]
PASSWORD = "front-door-pw-1"

pytestmark = pytest.mark.django_db(transaction=True)


@dataclass
class Answer:
    status: int
    body: str
    headers: str


@dataclass
class FrontDoor:
    url: str
    workdir: Path
    logs: list[Path]

    def curl(self, path: str, *, jar: Path | None = None, **options: Any) -> Answer:
        """One request as curl sends it: no ``Cookie`` header unless ``jar`` is given."""
        body, head = self.workdir / "body", self.workdir / "head"
        cmd = ["curl", "-sS", "-o", str(body), "-D", str(head), "-w", "%{http_code}"]
        if jar is not None:
            cmd += ["-b", str(jar), "-c", str(jar)]
        for header in options.get("headers", ()):
            cmd += ["-H", header]
        if "data" in options:
            for key, value in options["data"].items():
                cmd += ["--data-urlencode", f"{key}={value}"]
        done = subprocess.run(
            [*cmd, self.url + path], capture_output=True, text=True, timeout=60, check=True
        )
        return Answer(int(done.stdout), body.read_text(errors="replace"), head.read_text())

    def sign_in(self, username: str, jar: Path) -> None:
        """The log-in form, as a browser fills it (its CSRF cookie and token)."""
        page = self.curl("/login/", jar=jar)
        token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page.body)
        assert token, page.body[:2000]
        answer = self.curl(
            "/login/",
            jar=jar,
            headers=[f"Referer: {self.url}/login/"],
            data={
                "csrfmiddlewaretoken": html.unescape(token.group(1)),
                "username": username,
                "password": PASSWORD,
            },
        )
        assert answer.status == 302, (answer.status, answer.body[:2000])
        assert "sessionid=" in answer.headers

    def logs_tail(self) -> str:
        return "\n".join(tail(log) for log in self.logs)


@pytest.fixture(scope="module")
def front_door(
    django_db_setup: Any, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[FrontDoor]:
    """gunicorn (``scripts/serve.sh``) with the workspace proxy (uvicorn) in front of it."""
    workdir = tmp_path_factory.mktemp("front-door")
    env = {
        "DATABASE_URL": _database_url(),
        "REDIS_URL": django_settings.REDIS_URL,
        "PORTAL_ENV": "development",
        "DEBUG": "false",
    }
    web_port = free_port()
    web_log = workdir / "gunicorn.log"
    web = spawn(["bash", "scripts/serve.sh", f"127.0.0.1:{web_port}"], web_log, env=env, cwd=REPO)
    proxy: ProxyProcess | None = None
    try:
        upstream = f"http://127.0.0.1:{web_port}"
        wait_ready(web, lambda: http_ok(f"{upstream}/healthz"), what="gunicorn", log_file=web_log)
        proxy = ProxyProcess(workdir=workdir, env=env, upstream=upstream).start()
        yield FrontDoor(proxy.url, workdir, [web_log, proxy.log_file])
    finally:
        if proxy is not None:
            proxy.stop()
        terminate(web)


@pytest.fixture
def people(demo: dict[str, Any], settings: Any) -> dict[str, User]:
    """alice, bob and the platform admin with a password gunicorn can check (its hashers)."""
    settings.PASSWORD_HASHERS = django_settings.PASSWORD_HASHERS
    users = {name: demo["users"][name] for name in ("alice", "bob", "admin")}
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.PBKDF2PasswordHasher"]
    for user in users.values():
        user.set_password(PASSWORD)
        user.save(update_fields=["password"])
    return users


def test_after_the_admin_signs_in_a_visitor_without_a_cookie_is_nobody(
    front_door: FrontDoor, people: dict[str, User], tmp_path: Path
) -> None:
    # Given the platform admin signed in through the front door
    front_door.sign_in("admin", tmp_path / "admin.jar")
    assert "admin" in front_door.curl("/api/v1/me/", jar=tmp_path / "admin.jar").body

    # When a first-time visitor (no Cookie header at all) asks, several times
    for _ in range(3):
        me = front_door.curl("/api/v1/me/")
        jobs = front_door.curl("/jobs/")
        stack = front_door.curl("/gpu-stack/")
        login = front_door.curl("/login/")

        # Then it is nobody: 401 from the API, the pages send it to log in
        assert me.status == 401, (me.status, me.body, front_door.logs_tail())
        assert "admin" not in me.body
        assert jobs.status == 302 and "/login/" in jobs.headers, jobs.headers
        assert stack.status in (302, 404), stack.status
        assert "/login/" in stack.headers or stack.status == 404
        # and the log-in page greets no one
        assert login.status == 200
        assert "Log out" not in login.body and ">admin<" not in login.body
        # and no answer hands it somebody's session
        assert "sessionid=" not in me.headers + jobs.headers + login.headers


def test_a_token_client_without_cookies_acts_as_the_tokens_owner_only(
    front_door: FrontDoor, people: dict[str, User], tmp_path: Path
) -> None:
    # Given the admin signed in and alice has an API token
    front_door.sign_in("admin", tmp_path / "admin.jar")
    _, secret = api_token_create(user=people["alice"], description="front door")

    # When alice's script calls the API with its token and no cookie
    answers = [
        front_door.curl("/api/v1/me/", headers=[f"Authorization: Bearer {secret}"])
        for _ in range(5)
    ]

    # Then every answer is alice's, never the admin's
    for answer in answers:
        assert answer.status == 200, answer.body
        assert '"username":"alice"' in answer.body.replace(" ", ""), answer.body
        assert '"is_platform_admin":true' not in answer.body.replace(" ", "")
    # and nothing else rides along: the admin-only API refuses her token, and the pages
    # (which know sessions, not tokens) see nobody signed in
    bearer = [f"Authorization: Bearer {secret}"]
    changes = front_door.curl("/api/v1/cluster/gpu-changes/", headers=bearer)
    assert changes.status in (403, 404), changes.status
    page = front_door.curl("/gpu-stack/", headers=bearer)
    assert page.status == 302 and "/login/" in page.headers, (page.status, page.headers)


def test_two_users_signing_in_alternately_each_stay_themselves(
    front_door: FrontDoor, people: dict[str, User], tmp_path: Path
) -> None:
    # Given alice and bob sign in alternately, each in their own browser
    jars = {name: tmp_path / f"{name}.jar" for name in ("alice", "bob")}
    for round_ in range(2):
        for name in ("alice", "bob") if round_ == 0 else ("bob", "alice"):
            front_door.sign_in(name, jars[name])

    # When they and an anonymous visitor take turns over many requests on one proxy
    for _ in range(15):
        for name, jar in jars.items():
            answer = front_door.curl("/api/v1/me/", jar=jar)
            # Then each is always themselves
            assert answer.status == 200, answer.body
            assert f'"username":"{name}"' in answer.body.replace(" ", ""), (name, answer.body)
        assert front_door.curl("/api/v1/me/").status == 401
