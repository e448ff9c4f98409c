from datetime import UTC, datetime

import pytest

from scheduling.k8s_time import parse_time


@pytest.mark.parametrize(
    "text, moment",
    [
        ("2026-11-20T12:00:00Z", datetime(2026, 11, 20, 12, tzinfo=UTC)),
        # kubelet log timestamps carry nanoseconds: cut to microseconds
        ("2026-11-20T12:00:00.123456789Z", datetime(2026, 11, 20, 12, 0, 0, 123456, tzinfo=UTC)),
        ("2026-11-20T13:00:00+01:00", datetime(2026, 11, 20, 12, tzinfo=UTC)),
    ],
)
def test_a_kubernetes_timestamp_is_the_moment_it_names(text: str, moment: datetime) -> None:
    assert parse_time(text) == moment


@pytest.mark.parametrize("text", [None, "", "step 1200 saved", "2026-11-20T12:00:00"])
def test_what_is_no_timestamp_or_names_no_zone_is_none(text: str | None) -> None:
    assert parse_time(text) is None
