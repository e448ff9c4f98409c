from decimal import Decimal

import pytest

from scheduling import (
    cpu_millis,
    format_quantity,
    memory_bytes,
    normalise_resources,
    parse_quantity,
)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("1", Decimal(1)),
        ("0.5", Decimal("0.5")),
        (".5", Decimal("0.5")),
        ("100m", Decimal("0.1")),
        ("250u", Decimal("0.00025")),
        ("5n", Decimal("5e-9")),
        ("2k", Decimal(2000)),
        ("1M", Decimal(10**6)),
        ("3G", Decimal(3 * 10**9)),
        ("1T", Decimal(10**12)),
        ("1P", Decimal(10**15)),
        ("2E", Decimal(2 * 10**18)),
        ("1Ki", Decimal(1024)),
        ("1Mi", Decimal(2**20)),
        ("80Gi", Decimal(80 * 2**30)),
        ("1.5Gi", Decimal(3 * 2**29)),
        ("1Ti", Decimal(2**40)),
        ("1Pi", Decimal(2**50)),
        ("1Ei", Decimal(2**60)),
        ("1e3", Decimal(1000)),
        ("1E3", Decimal(1000)),
        ("12e-3", Decimal("0.012")),
        ("+4", Decimal(4)),
        (7, Decimal(7)),
        (0.1, Decimal("0.1")),
    ],
)
def test_parse_quantity(text: str | int | float, expected: Decimal) -> None:
    assert parse_quantity(text) == expected


@pytest.mark.parametrize("text", ["", "abc", "1.2.3", "1 Gi", "Gi", "1gi", "1KiB", "--1", "1e"])
def test_parse_quantity_rejects_what_the_api_server_rejects(text: str) -> None:
    with pytest.raises(ValueError, match="invalid quantity"):
        parse_quantity(text)


def test_parse_quantity_rejects_bool() -> None:
    with pytest.raises(TypeError):
        parse_quantity(True)


@pytest.mark.parametrize(
    ("value", "millis"),
    [("1", 1000), ("500m", 500), ("0.1", 100), ("1.0005", 1001), ("1u", 1), (2, 2000), ("1e-3", 1)],
)
def test_cpu_millis_rounds_up(value: str | int, millis: int) -> None:
    assert cpu_millis(value) == millis


@pytest.mark.parametrize(
    ("value", "size"),
    [("1Gi", 2**30), ("1G", 10**9), ("0.5", 1), ("1500m", 2), ("128974848", 128974848)],
)
def test_memory_bytes_rounds_up(value: str, size: int) -> None:
    assert memory_bytes(value) == size


def test_normalise_resources_uses_each_resource_unit() -> None:
    raw: dict[str, str | int] = {
        "cpu": "1500m",
        "memory": "80Gi",
        "ephemeral-storage": "10G",
        "hugepages-2Mi": "4Mi",
        "nvidia.com/gpu": "8",
        "nvidia.com/mig-1g.10gb": 7,
        "pods": "110",
    }
    assert normalise_resources(raw) == {
        "cpu": 1500,
        "memory": 80 * 2**30,
        "ephemeral-storage": 10 * 10**9,
        "hugepages-2Mi": 4 * 2**20,
        "nvidia.com/gpu": 8,
        "nvidia.com/mig-1g.10gb": 7,
        "pods": 110,
    }


@pytest.mark.parametrize("value", ["0.5", "500m", 1.5])
def test_normalise_resources_refuses_fractional_extended_resources(value: str | float) -> None:
    with pytest.raises(ValueError, match=r"nvidia\.com/gpu must be a whole number"):
        normalise_resources({"nvidia.com/gpu": value})


@pytest.mark.parametrize(
    ("value", "resource", "text"),
    [
        (1500, "cpu", "1500m"),
        (2000, "cpu", "2"),
        (80 * 2**30, "memory", "80Gi"),
        (1536 * 2**20, "memory", "1536Mi"),
        (10**9, "memory", "1G"),
        (1001, "memory", "1001"),
        (8, "nvidia.com/gpu", "8"),
        (Decimal("0.25"), None, "0.25"),
    ],
)
def test_format_quantity(value: int | Decimal, resource: str | None, text: str) -> None:
    assert format_quantity(value, resource) == text


@pytest.mark.parametrize("text", ["250m", "3", "64Gi", "1500Mi"])
def test_format_then_parse_round_trips(text: str) -> None:
    resource = "cpu" if not text.endswith("i") else "memory"
    normalised = normalise_resources({resource: text})[resource]
    assert normalise_resources({resource: format_quantity(normalised, resource)}) == {
        resource: normalised
    }
