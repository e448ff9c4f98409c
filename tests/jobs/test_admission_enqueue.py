"""Queuing admission after commit: a burst of submits for a team shares one queued run."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from core.redis_client import redis_client
from jobs import tasks
from tests.factories import TeamFactory

pytestmark = pytest.mark.django_db


@pytest.fixture
def queued(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[int]]:
    """Team ids of the admission runs put on the broker; the marks start clear."""
    runs: list[int] = []
    monkeypatch.setattr(tasks.admission_task, "delay", runs.append)
    client = redis_client()
    marks = tasks.ADMISSION_QUEUED_KEY.format(team_id="*")
    for key in client.scan_iter(marks):
        client.delete(key)
    yield runs
    for key in client.scan_iter(marks):
        client.delete(key)


def commit(
    callbacks: Callable[..., Any], team_id: int
) -> None:  # one transaction that calls admission_enqueue, committed
    with callbacks(execute=True):
        tasks.admission_enqueue(team_id=team_id)


def test_a_burst_of_submits_queues_one_run_and_a_submit_after_it_starts_queues_another(
    queued: list[int], django_capture_on_commit_callbacks: Callable[..., Any]
) -> None:
    # Given two teams
    vision, nlp = TeamFactory(), TeamFactory()

    # When three submits for vision and one for nlp commit before any run starts
    for team in (vision, vision, vision, nlp):
        commit(django_capture_on_commit_callbacks, team.pk)

    # Then one run is queued per team
    assert queued == [vision.pk, nlp.pk]

    # When vision's run starts, and then another vision submit commits
    tasks.admission_task.run(vision.pk)
    commit(django_capture_on_commit_callbacks, vision.pk)

    # Then that submit queues a run of its own (the started run may have read too early)
    assert queued == [vision.pk, nlp.pk, vision.pk]


def test_a_run_that_could_not_be_queued_does_not_hold_back_the_next_submit(
    queued: list[int],
    django_capture_on_commit_callbacks: Callable[..., Any],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Given a broker that refuses the first message
    team = TeamFactory()

    def refuse(team_id: int) -> None:
        raise ConnectionError("broker unreachable")

    monkeypatch.setattr(tasks.admission_task, "delay", refuse)
    with pytest.raises(ConnectionError):
        commit(django_capture_on_commit_callbacks, team.pk)

    # When the broker is back and the next submit commits
    monkeypatch.setattr(tasks.admission_task, "delay", queued.append)
    commit(django_capture_on_commit_callbacks, team.pk)

    # Then its run is queued
    assert queued == [team.pk]
