"""Printing what the API returned: a Rich table (``table``; ``wide`` adds columns), or the
API's own JSON or YAML, for scripts."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import click
import yaml
from rich.console import Console
from rich.table import Table

FORMATS = ("table", "wide", "json", "yaml")
output_option = click.option(
    "-o",
    "--output",
    type=click.Choice(FORMATS),
    default="table",
    show_default=True,
    help="table, wide (more columns), or the API's JSON or YAML.",
)


@dataclass(frozen=True)
class Column:
    title: str
    value: Callable[[Any], Any]
    wide: bool = False  # only with -o wide


def console() -> Console:
    # Piped, the lines are as long as they need (no wrapping at 80 columns): scripts and
    # `grep` read the same rows a person sees.
    piped = not sys.stdout.isatty()
    return Console(soft_wrap=True, highlight=False, width=1000 if piped else None)


def dump(data: Any, fmt: str) -> None:
    if fmt == "json":
        click.echo(json.dumps(data, indent=2, ensure_ascii=False))
    else:
        click.echo(yaml.safe_dump(data, sort_keys=False, allow_unicode=True).rstrip())


def text(value: Any) -> str:
    if value is None or value == "":
        return "-"
    return str(value)


def show(rows: Sequence[Any], columns: Sequence[Column], fmt: str, *, raw: Any = None) -> None:
    """``rows`` as a table, or ``raw`` (default: the rows) as JSON or YAML."""
    if fmt in ("json", "yaml"):
        dump(rows if raw is None else raw, fmt)
        return
    shown = [c for c in columns if fmt == "wide" or not c.wide]
    table = Table(box=None, pad_edge=False, header_style="bold")
    for column in shown:
        table.add_column(column.title.upper(), overflow="fold")
    for row in rows:
        table.add_row(*(text(column.value(row)) for column in shown))
    out = console()
    with out.capture() as captured:
        out.print(table)
    # Without the padding Rich puts after the last column.
    click.echo("\n".join(line.rstrip() for line in captured.get().splitlines()))
