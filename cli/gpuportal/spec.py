"""Building a job spec from a file and the command line's overrides."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import yaml

from gpuportal.client import EXIT_USAGE, CliError


def load(path: str | None) -> dict[str, Any]:
    """A spec from YAML or JSON (``-`` reads stdin); none: an empty spec."""
    if not path:
        return {}
    try:
        text = sys.stdin.read() if path == "-" else Path(path).read_text()
    except OSError as exc:
        raise CliError(f"Cannot read {path}: {exc.strerror}", code=EXIT_USAGE) from exc
    try:
        data = yaml.safe_load(text)  # JSON is YAML too
    except yaml.YAMLError as exc:
        raise CliError(f"{path} is neither YAML nor JSON: {exc}", code=EXIT_USAGE) from exc
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise CliError(
            f"{path} must hold one job spec (a mapping of fields), not a {type(data).__name__}.",
            code=EXIT_USAGE,
        )
    return data


def parse_value(text: str) -> Any:
    """``--set`` values are YAML: ``4`` is a number, ``true`` a boolean, ``[a, b]`` a list;
    anything else stays a string."""
    try:
        return yaml.safe_load(text) if text.strip() else ""
    except yaml.YAMLError:
        return text


def set_path(spec: dict[str, Any], path: str, value: Any) -> None:
    """Set ``gpu.count`` (dotted paths create the mappings they need)."""
    keys = path.split(".")
    if not all(keys):
        raise CliError(f"--set {path}: use a field path such as gpu.count", code=EXIT_USAGE)
    node = spec
    for key in keys[:-1]:
        child = node.get(key)
        if not isinstance(child, dict):
            child = {}
            node[key] = child
        node = child
    node[keys[-1]] = value


def apply_overrides(spec: dict[str, Any], sets: tuple[str, ...], **fields: Any) -> dict[str, Any]:
    """The common flags (``--name``, ``--gpus``…) and then each ``--set FIELD=VALUE``."""
    paths = {
        "team": "team",
        "name": "name",
        "image": "image",
        "gpus": "gpu.count",
        "gpu_product": "gpu.product",
        "launcher": "launcher",
        "cluster": "cluster",
    }
    for option, path in paths.items():
        if fields.get(option) is not None:
            set_path(spec, path, fields[option])
    for item in sets:
        path, sep, value = item.partition("=")
        if not sep:
            raise CliError(f"--set {item}: use FIELD=VALUE, e.g. gpu.count=4", code=EXIT_USAGE)
        set_path(spec, path.strip(), parse_value(value))
    return spec
