"""Ports for the local control plane, chosen so that no two clusters on one machine take the
same one.

A cluster chooses its ports (API server, etcd, each webhook) before the processes that
listen on them start, seconds later. Checking that a port is free is not enough when several
clusters start at once (the test suite runs six processes, each starting clusters): two can
find the same port free, and the second to bind fails with "address already in use". So a
chosen port is also written to a reservation table shared by every process of the machine
(a JSON file under a lock, ``fcntl.flock``), and no other process chooses it until the
reservation expires: by then its listener is up, and the bind check sees it.

The ports come from below the kernel's ephemeral range: a cluster keeps its ports across
restarts, and a port in that range could meanwhile be taken by any outgoing connection.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import random
import socket
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

RESERVATION_SECONDS = 600.0


class NoFreePort(RuntimeError):
    pass


def free_port(host: str = "127.0.0.1") -> int:
    """A port free on ``host`` that no other process of the machine has just chosen."""
    low = ephemeral_low()
    rng = random.SystemRandom()
    with _reservations() as reserved:
        for _ in range(200):
            port = rng.randint(min(10000, low - 1000), low - 1)
            if port not in reserved and port_free(port, host):
                reserved[port] = time.time() + RESERVATION_SECONDS
                return port
    raise NoFreePort(f"no free port below {low} on {host}")


def port_free(port: int, host: str = "127.0.0.1") -> bool:
    with socket.socket() as sock:
        try:
            sock.bind((host, port))
        except OSError:
            return False
        return True


def ephemeral_low() -> int:
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768  # Linux's default


def reservations_file() -> Path:
    return Path(tempfile.gettempdir()) / f"gpu-portal-ports-{os.getuid()}.json"


@contextlib.contextmanager
def _reservations() -> Iterator[dict[int, float]]:
    """The machine's live reservations (port → expiry), read and written back under a lock."""
    path = reservations_file()
    with open(path, "a+", encoding="utf-8") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        handle.seek(0)
        try:
            stored = {int(port): float(until) for port, until in json.loads(handle.read()).items()}
        except ValueError:  # empty, or cut short by a process killed mid-write
            stored = {}
        now = time.time()
        live = {port: until for port, until in stored.items() if until > now}
        yield live
        handle.seek(0)
        handle.truncate()
        handle.write(json.dumps(live))
        handle.flush()
