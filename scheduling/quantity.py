"""Kubernetes resource quantities (``500m``, ``80Gi``, ``1e3``) as exact numbers.

Decimal rather than float so that ``0.1`` CPUs is exactly 100 millicores and
``1.5Gi`` is exactly 1610612736 bytes, as the API server computes them.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from decimal import ROUND_CEILING, ROUND_FLOOR, ROUND_HALF_UP, Decimal, InvalidOperation

_BINARY = {
    "Ki": 2**10,
    "Mi": 2**20,
    "Gi": 2**30,
    "Ti": 2**40,
    "Pi": 2**50,
    "Ei": 2**60,
}
_DECIMAL = {
    "n": Decimal("1e-9"),
    "u": Decimal("1e-6"),
    "m": Decimal("1e-3"),
    "": Decimal(1),
    "k": Decimal("1e3"),
    "M": Decimal("1e6"),
    "G": Decimal("1e9"),
    "T": Decimal("1e12"),
    "P": Decimal("1e15"),
    "E": Decimal("1e18"),
}

# The number part is deliberately strict (no spaces, at most one dot): the API
# server rejects anything looser, and so should the portal's form validation.
_QUANTITY_RE = re.compile(
    r"^(?P<num>[+-]?(?:\d+\.?\d*|\.\d+))"
    r"(?:(?P<exp>[eE][+-]?\d+)|(?P<suffix>Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE])?)$"
)

# Resources measured in bytes; everything else that is not cpu is a count.
_BYTE_RESOURCES = frozenset({"memory", "ephemeral-storage", "storage"})


def parse_quantity(value: str | float | Decimal) -> Decimal:
    """Parse a Kubernetes quantity string (or a number) into an exact Decimal.

    Raises ValueError for anything the API server would reject (TypeError for a bool).
    """
    if isinstance(value, bool):
        raise TypeError(f"invalid quantity: {value!r}")
    if isinstance(value, Decimal):
        return value
    if isinstance(value, int):
        return Decimal(value)
    if isinstance(value, float):
        # str() first: Decimal(0.1) would carry the binary float's error.
        return Decimal(str(value))
    text = value.strip()
    match = _QUANTITY_RE.match(text)
    if match is None:
        raise ValueError(f"invalid quantity: {value!r}")
    try:
        number = Decimal(match.group("num"))
    except InvalidOperation as exc:  # pragma: no cover - the regex already guards this
        raise ValueError(f"invalid quantity: {value!r}") from exc
    exp = match.group("exp")
    if exp is not None:
        return number.scaleb(int(exp[1:]))
    suffix = match.group("suffix") or ""
    if suffix in _BINARY:
        return number * _BINARY[suffix]
    return number * _DECIMAL[suffix]


def _ceil_int(value: Decimal) -> int:
    return int(value.to_integral_value(rounding=ROUND_CEILING))


def cpu_millis(value: str | float | Decimal) -> int:
    """CPU in millicores, rounded up as the API server rounds ``MilliValue()``."""
    return _ceil_int(parse_quantity(value) * 1000)


def memory_bytes(value: str | float | Decimal) -> int:
    """Bytes, rounded up (``0.5`` bytes is 1 byte, as in ``Quantity.Value()``)."""
    return _ceil_int(parse_quantity(value))


def is_byte_resource(name: str) -> bool:
    return name in _BYTE_RESOURCES or name.startswith("hugepages-")


def normalise_quantity(name: str, value: str | float | Decimal) -> int:
    """One resource value in the unit the scheduling core uses for ``name``."""
    if name == "cpu":
        return cpu_millis(value)
    if is_byte_resource(name):
        return memory_bytes(value)
    quantity = parse_quantity(value)
    if quantity != quantity.to_integral_value():
        # The API server refuses fractional extended resources (a GPU cannot be split
        # by asking for 0.5); failing loudly beats silently rounding to 0 or 1.
        raise ValueError(f"{name} must be a whole number, got {value!r}")
    return int(quantity)


def normalise_resources(resources: Mapping[str, str | float | Decimal]) -> dict[str, int]:
    """Turn a Kubernetes resource list into ints: cpu→millicores, memory→bytes, rest→counts."""
    return {name: normalise_quantity(name, value) for name, value in resources.items()}


def _format_plain(value: Decimal) -> str:
    if value == value.to_integral_value():
        return str(int(value))
    return format(value.normalize(), "f")


def _largest_suffix(whole: int, suffixes: Mapping[str, int | Decimal]) -> str | None:
    for suffix, factor in suffixes.items():
        if whole >= factor and whole % factor == 0:
            return f"{whole // int(factor)}{suffix}"
    return None


_BINARY_DOWN = dict(reversed(_BINARY.items()))  # Ei first
_DECIMAL_DOWN = {s: _DECIMAL[s] for s in ("E", "P", "T", "G", "M", "k")}


def canonical_quantity(amount: int | Decimal, *, binary: bool = False) -> str:
    """``amount`` as ``resource.Quantity.String()`` spells it: the largest exact suffix of
    its format (``8Gi``, ``2k``), milli- or nano- units for fractions (``500m``)."""
    amount = Decimal(amount)
    if amount == 0:
        return "0"
    if amount != amount.to_integral_value():
        milli = amount * 1000
        if milli == milli.to_integral_value():
            return f"{int(milli)}m"
        return f"{int((amount * 10**9).to_integral_value())}n"
    whole = int(amount)
    return _largest_suffix(whole, _BINARY_DOWN if binary else _DECIMAL_DOWN) or str(whole)


def format_quantity(value: int | Decimal, resource: str | None = None) -> str:
    """Render a normalised value back in the way a person writes it in a manifest.

    ``cpu`` is taken as millicores (``1500`` → ``1500m``, ``2000`` → ``2``); byte
    resources use the largest exact binary suffix (``85899345920`` → ``80Gi``) and
    fall back to decimal suffixes; counts are plain integers.
    """
    amount = Decimal(value)
    if resource == "cpu":
        if amount % 1000 == 0:
            return str(int(amount / 1000))
        return f"{_format_plain(amount)}m"
    byte_count = resource is not None and is_byte_resource(resource)
    if byte_count and amount != 0 and amount == amount.to_integral_value():
        whole = int(amount)
        suffixed = _largest_suffix(whole, _BINARY_DOWN) or _largest_suffix(whole, _DECIMAL_DOWN)
        if suffixed:
            return suffixed
    return _format_plain(amount)


def _number(value: Decimal, places: int, *, down: bool) -> str:
    """``31.9``, ``2``, ``0.25``: at most ``places`` decimals, no trailing zeros; ``down``
    rounds toward zero (a capacity shown must never be more than there is)."""
    step = Decimal(1).scaleb(-places)
    rounded = value.quantize(step, rounding=ROUND_FLOOR if down else ROUND_HALF_UP)
    text = format(rounded, "f").rstrip("0").rstrip(".") if places else format(rounded, "f")
    return text or "0"


def human_number(value: int | Decimal, resource: str, *, down: bool = False) -> str:
    """A normalised amount as a person counts it: CPUs for ``cpu`` (millicores in),
    GiB for byte resources, a plain count otherwise (``31900`` cpu → ``31.9``). ``down``
    for a capacity or what is free: 63.996 GiB free is "63.99", never "64"."""
    amount = Decimal(value)
    if resource == "cpu":
        return _number(amount / 1000, 3, down=down)
    if is_byte_resource(resource):
        return _number(amount / 2**30, 2, down=down)
    return _number(amount, 0, down=down)


def human_quantity(value: int | Decimal, resource: str, *, down: bool = False) -> str:
    """``human_number`` with its unit: ``250 CPUs``, ``1 CPU``, ``16 GiB memory``,
    ``8 nvidia.com/gpu``."""
    number = human_number(value, resource, down=down)
    if resource == "cpu":
        return f"{number} CPU" if number == "1" else f"{number} CPUs"
    if is_byte_resource(resource):
        return f"{number} GiB {resource}"
    return f"{number} {resource}"


# -- Quota units -------------------------------------------------------------------------
# A team's quota counts cpu in cores, memory in GiB, and every other resource (GPUs, MIG
# slices, shared GPUs) in devices; a job's demand counts the same in base units (millicores,
# bytes, devices); the cluster's ResourceQuota and ClusterQueue take Kubernetes quantities.
# These four are the only conversions between them.
GIB = 2**30


def quota_base(resource: str, amount: int) -> int:
    """A quota amount (cores, GiB or devices) in a demand's base units."""
    if resource == "cpu":
        return amount * 1000
    if resource == "memory":
        return amount * GIB
    return amount


def quota_quantity(resource: str, amount: int) -> str:
    """A quota amount as the quantity a ResourceQuota or a ClusterQueue takes (``16Gi``)."""
    return f"{amount}Gi" if resource == "memory" else str(amount)


def quota_from_quantity(resource: str, quantity: str | int) -> int:
    """A ResourceQuota's or ClusterQueue's quantity in quota units, rounded down."""
    value = parse_quantity(str(quantity))
    return int(value / GIB) if resource == "memory" else int(value)


def quota_words(resource: str, base: int) -> str:
    """An amount in base units as a quota reads: ``8 cores``, ``64 GiB``, ``4``."""
    if resource == "cpu":
        return f"{base / 1000:g} cores"
    if resource == "memory":
        return f"{base / GIB:g} GiB"
    return str(base)
