"""docker-compose.yml, the Dockerfile and .dockerignore agree with the code they run.

No container engine runs here, so every name the files use (services, management
commands, the Celery app, the WSGI module, files they mount) is checked against the
project itself.
"""

from __future__ import annotations

import fnmatch
import importlib
import json
import os
import re
import runpy
import shlex
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest
import yaml
from celery import Celery
from celery.app.utils import find_app
from django.core.management import get_commands

ROOT = Path(__file__).resolve().parents[2]
COMPOSE = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
SERVICES: dict[str, dict[str, Any]] = COMPOSE["services"]
DOCKERFILE = (ROOT / "Dockerfile").read_text()
PORTAL_SERVICES = ("migrate", "web", "proxy", "worker", "beat")
VARIABLE_RE = re.compile(r"\$\{(\w+)(?::?-([^}]*))?\}")


def expand(text: str) -> str:
    """Compose's ``${VAR:-default}`` with the default (the host environment is not ours)."""
    return VARIABLE_RE.sub(lambda m: m.group(2) or "", text)


def command_of(service: dict[str, Any]) -> list[str]:
    command = service.get("command", [])
    return shlex.split(command) if isinstance(command, str) else [str(w) for w in command]


def commands() -> dict[str, list[str]]:
    return {name: command_of(s) for name, s in SERVICES.items() if s.get("command")}


def after(words: list[str], *prefix: str) -> list[str] | None:
    """The words following ``prefix`` when the command starts with it."""
    n = len(prefix)
    return words[n:] if words[:n] == list(prefix) else None


def dockerfile_instruction(name: str) -> list[str]:
    lines = re.findall(rf"^{name}\s+(.+)$", DOCKERFILE, re.M)
    assert lines, f"no {name} in the Dockerfile"
    return [line.strip() for line in lines]


def dockerignored(path: str) -> bool:
    patterns = [
        line.strip()
        for line in (ROOT / ".dockerignore").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]
    parts = Path(path).parts
    candidates = {"/".join(parts[: i + 1]) for i in range(len(parts))}
    ignored = False
    for pattern in patterns:
        negate = pattern.startswith("!")
        pattern = pattern.lstrip("!").rstrip("/")
        bare = pattern.removeprefix("**/")
        if any(
            fnmatch.fnmatch(c, pattern) or fnmatch.fnmatch(Path(c).name, bare) for c in candidates
        ):
            ignored = not negate
    return ignored


def gitignored(path: Path) -> bool:
    for ignore in (path.parent / ".gitignore", ROOT / ".gitignore"):
        if ignore.exists():
            rel = path.relative_to(ignore.parent).as_posix()
            lines = [x.strip() for x in ignore.read_text().splitlines()]
            if any(x and not x.startswith("#") and fnmatch.fnmatch(rel, x) for x in lines):
                return True
    return False


def test_all_services_are_defined() -> None:
    # Given the compose file
    # When we list its services
    # Then the database, the broker and every portal role are there
    assert {"postgres", "redis", "migrate", "web", "proxy", "worker", "beat"} <= set(SERVICES)
    assert SERVICES["postgres"]["image"].split(":")[0] == "postgres"
    assert SERVICES["redis"]["image"].split(":")[0] == "redis"


@pytest.mark.parametrize("name", sorted(SERVICES))
def test_every_service_has_an_image_or_a_build(name: str) -> None:
    service = SERVICES[name]
    assert service.get("image") or service.get("build")
    build = service.get("build")
    if build:
        context = build if isinstance(build, str) else build.get("context", ".")
        dockerfile = (
            "Dockerfile" if isinstance(build, str) else build.get("dockerfile", "Dockerfile")
        )
        assert (ROOT / context).is_dir(), context
        assert (ROOT / context / dockerfile).is_file(), dockerfile


def test_manage_py_commands_exist() -> None:
    # Given every `python manage.py <command>` the services run
    found = {
        name: rest[0]
        for name, words in commands().items()
        if (rest := after(words, "python", "manage.py"))
    }
    # Then each names a real management command, and the schema is migrated by one of them
    assert found, "no service runs manage.py"
    available = get_commands()
    assert {cmd for cmd in found.values() if cmd not in available} == set()
    assert found.get("migrate") == "migrate"


def test_celery_services_load_the_portal_app() -> None:
    # Given every `celery -A <app> <role>` the services run
    found = {
        name: (rest[0], rest[1])
        for name, words in commands().items()
        if (rest := after(words, "celery", "-A"))
    }
    # Then the worker and beat run, and each app loads as a Celery app the way `-A` does
    assert {found["worker"][1], found["beat"][1]} == {"worker", "beat"}
    for app_name, _role in found.values():
        assert isinstance(find_app(app_name), Celery), app_name


def test_gunicorn_serves_an_importable_wsgi_app() -> None:
    # Given the web service's and the image's gunicorn commands
    image_cmd = json.loads(dockerfile_instruction("CMD")[-1])
    targets = []
    for words in (command_of(SERVICES["web"]), image_cmd):
        assert words[0] == "gunicorn"
        targets.append(next(w for w in words[1:] if not w.startswith("-") and ":" in w))
    # Then each module:attr imports and is a WSGI callable
    for target in targets:
        module, attr = target.split(":")
        assert callable(getattr(importlib.import_module(module), attr)), target
    # And the proxy in front publishes port 8000 and sends the portal's pages to the port
    # gunicorn binds in web (gunicorn.conf.py, which the command does not override)
    assert any(p.endswith(":8000") for p in map(expand, SERVICES["proxy"]["ports"]))
    proxy = command_of(SERVICES["proxy"])
    assert proxy[:2] == ["uvicorn", "workspaces.proxy.asgi:application"]
    assert proxy[proxy.index("--ws") + 1] == "wsproto"  # refusals logged as such, not ERROR
    assert SERVICES["proxy"]["environment"]["WORKSPACE_PROXY_UPSTREAM"] == "http://web:8000"
    assert "ports" not in SERVICES["web"]
    assert runpy.run_path(str(ROOT / "gunicorn.conf.py"))["bind"] == "0.0.0.0:8000"
    assert not any(
        w.startswith(("--bind", "-b", "--config", "-c")) for w in command_of(SERVICES["web"])
    )


def test_depends_on_names_services_that_can_satisfy_the_condition() -> None:
    # Given every service's depends_on
    for name, service in SERVICES.items():
        depends = service.get("depends_on", {})
        conditions = (
            dict.fromkeys(depends, "service_started")
            if isinstance(depends, list)
            else {dep: spec.get("condition", "service_started") for dep, spec in depends.items()}
        )
        for dep, condition in conditions.items():
            # Then each names a defined service, with a healthcheck when it must be healthy
            assert dep in SERVICES, (name, dep)
            if condition == "service_healthy":
                assert SERVICES[dep].get("healthcheck"), (name, dep)
    # And web starts only after the database is healthy and migrations have finished
    web = SERVICES["web"]["depends_on"]
    assert web["postgres"]["condition"] == "service_healthy"
    assert web["redis"]["condition"] == "service_healthy"
    assert web["migrate"]["condition"] == "service_completed_successfully"
    assert SERVICES["migrate"].get("restart") == "no"


def test_mounted_files_and_volumes_exist() -> None:
    # Given every volume mount of every service
    named = set(COMPOSE.get("volumes") or {})
    for name, service in SERVICES.items():
        for mount in service.get("volumes", []):
            source = expand(mount if isinstance(mount, str) else mount["source"]).split(":")[0]
            # Then named volumes are declared and files inside the repository exist
            if "/" not in source and not source.startswith((".", "~")):
                assert source in named, (name, source)
            elif not source.startswith(("/", "~")):
                assert (ROOT / source).exists(), (name, source)
    # And the kubeconfig is mounted read-only where KUBECONFIG points
    env = SERVICES["web"]["environment"]
    kube = [m for m in SERVICES["web"]["volumes"] if f":{env['KUBECONFIG']}:" in f"{m}:"]
    assert kube and kube[0].endswith(":ro"), SERVICES["web"]["volumes"]
    assert "KUBECONFIG_HOST_PATH" in kube[0]


def test_secret_key_comes_from_a_secret_file_kept_out_of_git_and_images() -> None:
    # Given the compose secrets
    secrets = COMPOSE["secrets"]
    for name in PORTAL_SERVICES:
        service = SERVICES[name]
        env = service["environment"]
        # Then no service has the key in plain text; it reads a mounted secret
        assert "SECRET_KEY" not in env
        assert env["SECRET_KEY_FILE"].startswith("/run/secrets/")
        secret_name = env["SECRET_KEY_FILE"].removeprefix("/run/secrets/")
        assert secret_name in service["secrets"]
        assert secret_name in secrets
    for secret in secrets.values():
        path = ROOT / secret["file"]
        assert path.resolve().is_relative_to(ROOT)
        # And the file is either there or generated per deployment: never committed nor
        # copied into an image
        if not path.exists():
            assert path.parent.is_dir(), path
            assert gitignored(path), f"{path} must be git-ignored"
        assert dockerignored(path.relative_to(ROOT).as_posix()), f"{path} must be docker-ignored"


def test_portal_services_share_the_production_environment() -> None:
    # Given the environment of every portal service (the x-portal-env anchor)
    envs = [SERVICES[name]["environment"] for name in PORTAL_SERVICES]
    # Then they are identical and point at the compose services
    assert all(env == envs[0] for env in envs)
    env = {key: expand(str(value)) for key, value in envs[0].items()}
    assert env["PORTAL_ENV"] == "production"
    assert env["SECURE_SSL_REDIRECT"] == "false"
    assert "@postgres:5432/" in env["DATABASE_URL"]
    assert env["REDIS_URL"].startswith("redis://redis:6379/")
    for key in ("ALLOWED_HOSTS", "KUBECONFIG", "PROMETHEUS_URL"):
        assert env[key], key
    db = SERVICES["postgres"]["environment"]
    assert env["DATABASE_URL"].endswith(f"/{db['POSTGRES_DB']}")
    assert f"//{db['POSTGRES_USER']}:{expand(db['POSTGRES_PASSWORD'])}@" in env["DATABASE_URL"]


def test_compose_environment_loads_production_settings(tmp_path: Path) -> None:
    # Given the compose environment, with a generated secret key file
    env = {key: expand(str(value)) for key, value in SERVICES["web"]["environment"].items()}
    key_file = tmp_path / "secret_key.txt"
    key_file.write_text(os.urandom(48).hex())
    env["SECRET_KEY_FILE"] = str(key_file)
    clean = {
        k: v
        for k, v in os.environ.items()
        if k not in ("SECRET_KEY", "DEBUG") and not k.endswith("_FILE")
    }
    # When Django's deployment checklist runs with it
    result = subprocess.run(
        [sys.executable, "manage.py", "check", "--deploy"],
        cwd=ROOT,
        env={**clean, **env, "DJANGO_SETTINGS_MODULE": "portal.settings"},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    output = result.stdout + result.stderr
    # Then the settings load, and the only security finding is the deliberate plain-http one
    assert "Traceback" not in output, output
    assert set(re.findall(r"security\.[WE]\d+", output)) <= {"security.W008"}, output


def test_make_run_starts_worker_and_beat_like_compose() -> None:
    # Given `make run` (scripts/run.sh) and the compose worker and beat
    makefile = (ROOT / "Makefile").read_text()
    run_target = re.search(r"^run:.*\n((?:\t.*\n)+)", makefile, re.M)
    assert run_target and "scripts/run.sh" in run_target.group(1)
    script = (ROOT / "scripts" / "run.sh").read_text()
    # Then both start the same Celery app the same way
    for role in ("worker", "beat"):
        assert f"celery -A portal {role}" in script
        assert command_of(SERVICES[role])[:4] == ["celery", "-A", "portal", role]


def test_dockerfile_builds_a_non_root_gunicorn_image() -> None:
    # Given the Dockerfile
    # Then it starts from Python 3.11 slim, installs the project, collects static files
    # with the production storage, and runs as a non-root user
    assert dockerfile_instruction("FROM")[0] == "python:3.11-slim"
    assert re.search(r"pip install (--no-deps )?\.(\s|$)", DOCKERFILE)
    assert "manage.py collectstatic --noinput" in DOCKERFILE
    assert "PORTAL_ENV=production" in DOCKERFILE
    user = dockerfile_instruction("USER")[-1].split(":")[0]
    assert user not in ("root", "0")
    # And the command's module is part of the project
    cmd = json.loads(dockerfile_instruction("CMD")[-1])
    assert cmd[0] == "gunicorn"
    module = next(w for w in cmd[1:] if ":" in w and not w.startswith("-")).split(":")[0]
    assert (ROOT / (module.replace(".", "/") + ".py")).is_file(), module


def test_dockerignore_keeps_what_the_build_needs() -> None:
    # Given what `pip install .` and the image need from the build context
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    needed = [
        "pyproject.toml",
        project["readme"],
        "manage.py",
        "portal/settings.py",
        "portal/wsgi.py",
        "gunicorn.conf.py",
        "jobs/models.py",
        "templates/base.html",
        "static/css/portal.css",
    ]
    # Then none of it is excluded, while local state and secrets are
    assert [path for path in needed if dockerignored(path)] == []
    for local in (".venv/bin/python", ".git/HEAD", "var/demo.sqlite3", "portal/__pycache__/x.pyc"):
        assert dockerignored(local), local
