"""A reconcile pass holds its lock for as long as it runs, however long that is: a second
worker's pass finds it taken and skips, instead of tracking the same jobs at the same time
(real Redis; the renewal runs in a thread of its own, as in a worker)."""

from __future__ import annotations

import time

import pytest

from jobs.tracking import reconcile


def test_a_pass_longer_than_the_lock_timeout_keeps_its_lock(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Given a pass's lock of 2 s, renewed every 0.5 s
    monkeypatch.setattr(reconcile, "LOCK_TIMEOUT_SECONDS", 2)
    monkeypatch.setattr(reconcile, "LOCK_RENEW_SECONDS", 0.5)
    lock = reconcile._lock()
    assert lock.acquire()
    renewing = reconcile._renewed(lock)
    try:
        # When the pass runs past the lock's timeout
        time.sleep(3.5)
        # Then another worker's pass still finds it taken
        assert not reconcile._lock().acquire()
        assert lock.owned()
    finally:
        renewing.set()
        lock.release()
    # ...and once it ends, the next pass takes it
    other = reconcile._lock()
    assert other.acquire()
    other.release()
