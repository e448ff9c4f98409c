"""Production settings pass the deployment checklist; unsafe settings refuse to start."""

from __future__ import annotations

import os
import secrets
import string
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DATABASE_URL = "postgres://postgres@127.0.0.1:5432/gpu_portal_h4"
# Settings read from the environment that must not leak in from the test run.
PORTAL_VARIABLES = ("PORTAL_ENV", "SECRET_KEY", "DEBUG", "ALLOWED_HOSTS", "DATABASE_URL")


def random_secret_key() -> str:
    alphabet = string.ascii_letters + string.digits + "!@#%^&*(-_=+)"
    return "".join(secrets.choice(alphabet) for _ in range(64))


def check_deploy(**env: str) -> subprocess.CompletedProcess[str]:
    clean = {
        key: value
        for key, value in os.environ.items()
        if key not in PORTAL_VARIABLES and not key.endswith("_FILE")
    }
    clean["DJANGO_SETTINGS_MODULE"] = "portal.settings"
    return subprocess.run(
        [sys.executable, "manage.py", "check", "--deploy", "--fail-level", "WARNING"],
        cwd=ROOT,
        env={**clean, **env},
        capture_output=True,
        text=True,
        # 7 s on an idle machine; over 60 s once, when the suite's six processes and their
        # clusters loaded both cores (a wait for the process, not a bound on the check)
        timeout=240,
        check=False,
    )


def test_production_settings_pass_the_deployment_checklist() -> None:
    # Given production settings with a strong secret key and a host name
    # When Django's deployment checklist runs, failing on warnings
    result = check_deploy(
        PORTAL_ENV="production",
        SECRET_KEY=random_secret_key(),
        ALLOWED_HOSTS="portal.example.com",
        DATABASE_URL=DATABASE_URL,
    )
    # Then it finds nothing
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    assert "no issues" in output


def test_production_without_secret_key_refuses_to_start() -> None:
    # Given production settings without a SECRET_KEY
    # When anything loads the settings
    result = check_deploy(
        PORTAL_ENV="production", ALLOWED_HOSTS="portal.example.com", DATABASE_URL=DATABASE_URL
    )
    # Then it fails, naming the setting to fix
    assert result.returncode != 0
    assert "SECRET_KEY" in result.stderr


@pytest.mark.parametrize("debug", ["true", "1"])
def test_production_with_debug_refuses_to_start(debug: str) -> None:
    # Given production settings with DEBUG switched on
    # When anything loads the settings
    result = check_deploy(
        PORTAL_ENV="production",
        DEBUG=debug,
        SECRET_KEY=random_secret_key(),
        ALLOWED_HOSTS="portal.example.com",
        DATABASE_URL=DATABASE_URL,
    )
    # Then it fails, naming DEBUG
    assert result.returncode != 0
    assert "DEBUG must be false" in result.stderr
