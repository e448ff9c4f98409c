"""The sandbox store's lock sharing: API requests get in between a controller's objects."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from sandbox.store import Store

OBJECTS = 200


@pytest.mark.parametrize("depth", [1, 2])
def test_a_waiting_request_is_served_between_two_objects_of_a_controller_step(
    tmp_path: Path, depth: int
) -> None:
    # Given a controller step over 200 objects (2 ms each) that holds the store lock,
    # possibly re-entered, and an API request that arrives while it runs
    store = Store(tmp_path / "state.sqlite3")
    synced = 0
    served_after: list[int] = []

    def request() -> None:
        with store.serving():
            served_after.append(synced)

    def step() -> None:
        nonlocal synced
        for _ in range(depth):
            store.lock.acquire()
        try:
            client = threading.Thread(target=request)
            client.start()
            while not store._waiting:  # the request is now blocked on the lock
                time.sleep(0.001)
            for _ in range(OBJECTS):
                store.yield_to_requests()
                time.sleep(0.002)
                synced += 1
        finally:
            for _ in range(depth):
                store.lock.release()
        client.join(timeout=5)

    # When the step runs
    step()

    # Then the request was answered before the step's second object, not after its last
    assert served_after == [0]
    assert synced == OBJECTS


def test_no_request_waiting_means_no_yield(tmp_path: Path) -> None:
    # Given a controller holding the lock with nobody waiting
    store = Store(tmp_path / "state.sqlite3")
    with store.lock:
        # Then it keeps the lock (and says so: objects it read are still current)
        assert store.yield_to_requests() is False
