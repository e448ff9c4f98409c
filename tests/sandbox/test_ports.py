"""Clusters starting at once on one machine never choose the same port (the suite's six
processes start clusters concurrently; one once failed with "address already in use")."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from sandbox.controlplane.ports import ephemeral_low, port_free

CHOOSE = """
import sys
from sandbox.controlplane.ports import free_port
sys.stdin.read()  # all start together
print(" ".join(str(free_port()) for _ in range(250)))
"""


def test_processes_choosing_ports_at_once_never_choose_the_same_one(tmp_path: Path) -> None:
    # Given four processes (clusters starting) that each choose 250 ports at the same moment,
    # none of them listening yet, sharing this machine's reservations (in TMPDIR)
    env = {**os.environ, "TMPDIR": str(tmp_path), "PYTHONPATH": str(Path.cwd())}
    choosers = [
        subprocess.Popen(
            [sys.executable, "-c", CHOOSE],
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        for _ in range(4)
    ]
    outputs = [chooser.communicate("", timeout=60)[0] for chooser in choosers]

    # Then all 1,000 ports differ (by chance alone, ~20 would repeat), each free and below
    # the ephemeral range
    ports = [int(port) for output in outputs for port in output.split()]
    assert len(ports) == 1000
    assert len(set(ports)) == 1000
    assert all(port < ephemeral_low() for port in ports)
    assert all(port_free(port) for port in ports[:50])
