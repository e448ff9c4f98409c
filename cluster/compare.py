"""Whether an object in the cluster already says what the portal wants it to say.

The API server gives objects back with defaults filled in (by the schema, a webhook or the
controller) and quantities in canonical form (``"1000000"`` is read back as ``"1M"``): a
sync that compared them for equality would rewrite them on every run."""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

from scheduling.quantity import parse_quantity


def contains(have: Any, want: Any, quantities: Collection[str] = ()) -> bool:
    """Whether ``have`` holds everything ``want`` says (added fields are fine; the values
    of the keys named in ``quantities`` are compared as Kubernetes quantities)."""
    if isinstance(want, dict):
        return isinstance(have, dict) and all(
            key in have
            and (
                same_quantity(have[key], value)
                if key in quantities
                else contains(have[key], value, quantities)
            )
            for key, value in want.items()
        )
    if isinstance(want, list):
        return (
            isinstance(have, list)
            and len(have) == len(want)
            and all(contains(h, w, quantities) for h, w in zip(have, want, strict=True))
        )
    return bool(have == want)


def same_quantity(have: Any, want: Any) -> bool:
    try:
        return bool(parse_quantity(have) == parse_quantity(want))
    except ValueError:
        return bool(have == want)
