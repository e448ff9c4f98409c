"""Serve plotly.js from the installed plotly package (the portal works offline)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import plotly
from django.contrib.staticfiles.finders import BaseFinder
from django.core.files.storage import FileSystemStorage

PLOTLY_STATIC_PATH = "plotly/plotly.min.js"
_PACKAGE_DATA = Path(plotly.__file__).resolve().parent / "package_data"


class PlotlyFinder(BaseFinder):
    """Exposes exactly one file, ``plotly/plotly.min.js``, from plotly's package data."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.storage = FileSystemStorage(location=str(_PACKAGE_DATA))

    def check(self, **kwargs: Any) -> list[Any]:
        return []

    def find(  # type: ignore[override]
        self, path: str, find_all: bool = False, **kwargs: Any
    ) -> str | list[str]:
        if path == PLOTLY_STATIC_PATH:
            found = str(_PACKAGE_DATA / "plotly.min.js")
            return [found] if find_all else found
        return [] if find_all else ""

    def list(self, ignore_patterns: Any) -> Any:
        storage = FileSystemStorage(location=str(_PACKAGE_DATA))
        storage.prefix = "plotly"  # type: ignore[attr-defined]
        yield "plotly.min.js", storage
