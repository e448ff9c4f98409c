"""Quantities as the API server's admission and validation read and print them.

The parsing and the canonical spelling are the scheduling core's (one definition in the
project); this module only adds the sandbox's guard that a value is a quantity at all.
"""

from __future__ import annotations

from decimal import Decimal

from scheduling.quantity import canonical_quantity, parse_quantity

__all__ = ["format_quantity", "is_binary", "parse"]

_BINARY_SUFFIXES = ("Ki", "Mi", "Gi", "Ti", "Pi", "Ei")


def parse(value: object) -> Decimal:
    """``"500m"`` → ``Decimal("0.5")``; raises ``ValueError`` for anything else."""
    if isinstance(value, bool) or not isinstance(value, str | int | float | Decimal):
        raise ValueError(f"quantities must match the regular expression: {value!r}")
    return parse_quantity(value)


def is_binary(value: object) -> bool:
    return isinstance(value, str) and value.strip()[-2:] in _BINARY_SUFFIXES


def format_quantity(amount: Decimal, binary: bool = False) -> str:
    """Canonical form as ``resource.Quantity.String()`` prints it."""
    return canonical_quantity(amount, binary=binary)
