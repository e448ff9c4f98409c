"""The per-user API write throttle: DRF's sliding window, kept in Redis in one round trip."""

from __future__ import annotations

from typing import Any

import pytest
from redis import Redis
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


def test_a_write_costs_one_redis_round_trip(
    alice_api: APIClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    # given the throttle's (and Celery's) Redis commands counted, and one write made already
    # (Celery declares its queue on its first publish)
    alice_api.post("/api/v1/jobs/", training_spec(name="warm"), format="json")
    commands: list[str] = []
    execute = Redis.execute_command

    def counted(self: Redis, *args: Any, **options: Any) -> Any:
        commands.append(str(args[0]))
        return execute(self, *args, **options)

    monkeypatch.setattr(Redis, "execute_command", counted)

    # when a job is submitted
    response = alice_api.post("/api/v1/jobs/", training_spec(name="once"), format="json")

    # then the throttle made one call, the Lua script (the admission task is published on
    # commit, which the test transaction never reaches)
    assert response.status_code == 201
    assert commands == ["EVALSHA"]
