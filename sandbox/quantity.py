"""Kubernetes resource quantities for quota arithmetic and messages.

Placement uses ``scheduling``; this module only adds the exact ``Decimal`` arithmetic and
the canonical spelling (``500m``, ``8Gi``, ``8``) that quota messages and ``status.used``
print, which the scheduling core has no reason to know about.
"""

from __future__ import annotations

from decimal import Decimal

from scheduling import parse_quantity

_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL = {
    "n": Decimal("1e-9"),
    "u": Decimal("1e-6"),
    "m": Decimal("1e-3"),
    "": Decimal(1),
    "k": Decimal(10**3),
    "M": Decimal(10**6),
    "G": Decimal(10**9),
    "T": Decimal(10**12),
    "P": Decimal(10**15),
    "E": Decimal(10**18),
}


def parse(value: object) -> Decimal:
    """``"500m"`` → ``Decimal("0.5")``; raises ``ValueError`` for anything else."""
    if isinstance(value, bool) or not isinstance(value, str | int | float | Decimal):
        raise ValueError(f"quantities must match the regular expression: {value!r}")
    return parse_quantity(value)


def is_binary(value: object) -> bool:
    return isinstance(value, str) and value.strip()[-2:] in _BINARY


def format_quantity(amount: Decimal, binary: bool = False) -> str:
    """Canonical form as ``resource.Quantity.String()`` prints it (close enough for messages)."""
    if amount == 0:
        return "0"
    if amount != amount.to_integral_value():
        milli = amount * 1000
        if milli == milli.to_integral_value():
            return f"{int(milli)}m"
        return f"{int((amount * 10**9).to_integral_value())}n"
    whole = int(amount)
    if binary:
        for suffix in ("Ei", "Pi", "Ti", "Gi", "Mi", "Ki"):
            if whole % _BINARY[suffix] == 0:
                return f"{whole // _BINARY[suffix]}{suffix}"
        return str(whole)
    for suffix in ("E", "P", "T", "G", "M", "k"):
        factor = int(_DECIMAL[suffix])
        if whole % factor == 0 and whole >= factor:
            return f"{whole // factor}{suffix}"
    return str(whole)
