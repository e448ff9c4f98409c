"""The per-user API write throttle: DRF's sliding window, shared by every process."""

from __future__ import annotations

from typing import Any

import pytest
from rest_framework.test import APIClient

from portal.throttling import WriteRateThrottle
from tests.conftest import training_spec

pytestmark = pytest.mark.django_db


def test_a_refused_write_says_when_to_retry_and_the_window_slides(
    alice_api: APIClient, settings: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # given a limit of 2 writes a minute, the first at t=1000 and the second at t=1030
    settings.API_WRITE_RATE = "2/min"
    clock = iter([1000.0, 1030.0, 1040.0, 1061.0])
    monkeypatch.setattr(WriteRateThrottle, "timer", lambda self: next(clock))
    first = alice_api.post("/api/v1/jobs/", training_spec(name="a"), format="json")
    second = alice_api.post("/api/v1/jobs/", training_spec(name="b"), format="json")

    # when a third comes at t=1040, and a fourth at t=1061, after the first left the window
    third = alice_api.post("/api/v1/jobs/", training_spec(name="c"), format="json")
    fourth = alice_api.post("/api/v1/jobs/", training_spec(name="d"), format="json")

    # then the third is refused until the first is a minute old, and the fourth accepted
    assert [r.status_code for r in (first, second, third, fourth)] == [201, 201, 429, 201]
    assert third["Retry-After"] == "20"


def test_reads_are_never_throttled_and_each_user_has_a_window_of_their_own(
    alice_api: APIClient, bob_api: APIClient, settings: Any
) -> None:
    # given a limit of 1 write a minute, which alice has used
    settings.API_WRITE_RATE = "1/min"
    assert (
        alice_api.post("/api/v1/jobs/", training_spec(name="a"), format="json").status_code == 201
    )

    # when alice reads, and bob writes
    reads = [alice_api.get("/api/v1/jobs/").status_code for _ in range(3)]
    bobs = bob_api.post("/api/v1/jobs/", training_spec(name="b"), format="json")

    # then her reads are answered and bob's write is his first of the window
    assert reads == [200, 200, 200]
    assert bobs.status_code == 201
    # and her next write waits
    assert (
        alice_api.post("/api/v1/jobs/", training_spec(name="c"), format="json").status_code == 429
    )
