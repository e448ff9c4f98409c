"""Where the portal's URL and the API token are kept: the user's config directory, with
permissions 0600; ``GPU_PORTAL_URL`` and ``GPU_PORTAL_TOKEN`` override the file."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import click
import yaml

URL_ENV = "GPU_PORTAL_URL"
TOKEN_ENV = "GPU_PORTAL_TOKEN"  # noqa: S105 - the variable's name, not a secret


def config_path() -> Path:
    """``$XDG_CONFIG_HOME/gpuportal/config.yaml`` (``~/.config/...`` by default; the
    platform's own place on macOS and Windows)."""
    return Path(click.get_app_dir("gpuportal")) / "config.yaml"


@dataclass(frozen=True)
class Config:
    url: str
    token: str


def load() -> Config:
    stored: dict[str, str] = {}
    path = config_path()
    if path.exists():
        loaded = yaml.safe_load(path.read_text()) or {}
        if isinstance(loaded, dict):
            stored = {str(k): str(v) for k, v in loaded.items() if v is not None}
    return Config(
        url=(os.environ.get(URL_ENV) or stored.get("url") or "").rstrip("/"),
        token=os.environ.get(TOKEN_ENV) or stored.get("token") or "",
    )


def save(*, url: str, token: str) -> Path:
    """Write the file readable by its owner only: it holds a credential."""
    path = config_path()
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    # Created 0600 before anything is written, so the token is never readable by others.
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as handle:
        yaml.safe_dump({"url": url.rstrip("/"), "token": token}, handle)
    os.chmod(path, 0o600)  # an older file may have been created with other permissions
    return path
