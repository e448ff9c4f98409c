"""docs/configuration.md documents every environment variable the settings read; the README
starts with the two commands, stays short and links every page of docs/; the map of an app
in docs/architecture.md names every module of the app."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def test_every_setting_from_the_environment_is_documented() -> None:
    settings_source = (ROOT / "portal" / "settings.py").read_text()
    readme = (ROOT / "docs" / "configuration.md").read_text()
    names = set(re.findall(r'env_(?:str|int|float|bool|list)\(\s*"([A-Z_]+)"', settings_source))
    gunicorn_source = (ROOT / "gunicorn.conf.py").read_text()
    gunicorn_names = set(re.findall(r'os\.environ\.get\("([A-Z_]+)"', gunicorn_source))
    names |= gunicorn_names

    missing = sorted(name for name in names if f"`{name}`" not in readme)

    assert names, "no settings found: the pattern no longer matches portal/settings.py"
    assert gunicorn_names, "no settings found: the pattern no longer matches gunicorn.conf.py"
    assert missing == []


def test_readme_starts_with_the_two_commands() -> None:
    readme = (ROOT / "README.md").read_text()
    first_block = readme.split("```sh", 1)[1].split("```", 1)[0]

    assert "make run" in first_block and "make test" in first_block
    ci = (ROOT / ".ci" / "run").read_text()
    assert "make test" in ci


def test_readme_is_short_and_links_every_docs_page() -> None:
    readme = (ROOT / "README.md").read_text()
    pages = sorted(path.name for path in (ROOT / "docs").glob("*.md"))

    assert len(readme.splitlines()) <= 200
    assert [page for page in pages if f"(docs/{page}" not in readme] == []


def mapped_modules(app: str) -> set[str]:
    """The modules the table under "## The map of `<app>/`" names, one per row."""
    text = (ROOT / "docs" / "architecture.md").read_text()
    section = text.split(f"## The map of `{app}/`", 1)[1].split("\n## ", 1)[0]
    return set(re.findall(r"^\| `([^`]+\.py)` \|", section, flags=re.MULTILINE))


def modules_of(app: str) -> set[str]:
    return {
        str(path.relative_to(ROOT / app))
        for path in (ROOT / app).rglob("*.py")
        if "migrations" not in path.parts and path.name != "__init__.py"
    }


@pytest.mark.parametrize(
    "app",
    ["core", "cluster", "teams", "notifications", "jobs", "workspaces", "monitoring", "portal"],
)
def test_the_map_of_an_app_names_every_module_and_only_those(app: str) -> None:
    assert mapped_modules(app) == modules_of(app)


def test_the_map_check_sees_a_missing_module() -> None:
    assert "quota.py" in mapped_modules("jobs")
    assert mapped_modules("jobs") - {"quota.py"} != modules_of("jobs")
