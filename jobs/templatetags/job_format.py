"""How the job pages write figures a user reads at a glance."""

from __future__ import annotations

from django import template

register = template.Library()


@register.filter
def time_left(seconds: float | None) -> str:
    """``1h 12m`` / ``4m 10s`` (the CLI writes it the same way); "" without an estimate."""
    if seconds is None:
        return ""
    whole = round(seconds)
    hours, rest = divmod(whole, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}h {minutes:02d}m" if hours else f"{minutes}m {secs:02d}s"
