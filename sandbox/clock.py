"""The simulated clock every controller, duration and metric curve reads, and the wall
clock every timestamp the API serves is in.

Simulated time runs ``speed`` times faster than the wall clock and is persisted, so a
restarted sandbox resumes where it stopped: running pods keep their elapsed time. With
``--speed 10`` a "90s" training run finishes after 9 real seconds.

Timestamps (creation, start, finish, conditions, events, leases) are wall-clock times, as a
real API server's are: ``wall(t)`` maps a simulated moment onto the wall clock through the
anchors taken when this process started, and ``sim(t)`` maps back. So a client compares
them with its own clock (kubectl's ages) and never sees a time in the future.
"""

from __future__ import annotations

import functools
import threading
import time
from datetime import UTC, datetime

from scheduling.k8s_time import parse_time


class SimClock:
    def __init__(self, start: float, speed: float = 1.0) -> None:
        self._lock = threading.Lock()
        self._sim_base = start
        self._real_base = time.monotonic()
        self._wall_base = time.time()
        self.speed = speed

    def now(self) -> float:
        with self._lock:
            return self._sim_base + (time.monotonic() - self._real_base) * self.speed

    def wall(self, sim_time: float) -> float:
        """The wall-clock time at which the simulation reaches ``sim_time``."""
        return self._wall_base + (sim_time - self._sim_base) / self.speed

    def sim(self, wall_time: float) -> float:
        """The simulated time at wall-clock ``wall_time``."""
        return self._sim_base + (wall_time - self._wall_base) * self.speed

    def resume_from(self, sim_time: float) -> None:
        """Go on from ``sim_time`` as of now: simulated time stood still meanwhile."""
        with self._lock:
            self._sim_base = sim_time
            self._real_base = time.monotonic()
            self._wall_base = time.time()

    def advance(self, sim_seconds: float) -> None:
        """Jump the simulation forward (a test's way to let simulated hours pass)."""
        with self._lock:
            self._sim_base += sim_seconds
            self._wall_base -= sim_seconds / self.speed

    def real_seconds(self, sim_seconds: float) -> float:
        return sim_seconds / self.speed


def rfc3339(ts: float) -> str:
    """Kubernetes ``metav1.Time``: seconds precision, ``Z`` suffix."""
    return _rfc3339_seconds(int(ts))


@functools.lru_cache(maxsize=256)
def _rfc3339_seconds(seconds: int) -> str:
    # Controllers stamp thousands of objects a pass with the same second.
    return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def rfc3339_micro(ts: float) -> str:
    """``metav1.MicroTime`` as in ``eventTime``."""
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def parse_rfc3339(text: str) -> float:
    moment = parse_time(text)
    if moment is None:
        raise ValueError(f"not an RFC 3339 time: {text!r}")
    return moment.timestamp()


def parse_duration(text: str) -> float:
    """``"90s"``, ``"2m"``, ``"1h30m"``, ``"45"`` → seconds."""
    text = text.strip()
    if not text:
        raise ValueError("empty duration")
    if text.replace(".", "", 1).isdigit():
        return float(text)
    total = 0.0
    number = ""
    units = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400}
    i = 0
    while i < len(text):
        ch = text[i]
        if ch.isdigit() or ch == ".":
            number += ch
            i += 1
            continue
        unit = text[i : i + 2] if text[i : i + 2] == "ms" else ch
        if unit not in units or not number:
            raise ValueError(f"invalid duration {text!r}")
        total += float(number) * units[unit]
        number = ""
        i += len(unit)
    if number:
        raise ValueError(f"invalid duration {text!r}")
    return total
