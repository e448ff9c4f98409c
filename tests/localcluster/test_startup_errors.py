"""What the local cluster says when a component cannot start: the words a user acts on."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from sandbox.controlplane.plane import ControlPlane, ControlPlaneError


def test_a_component_out_of_inotify_instances_says_which_limit_to_raise(tmp_path: Path) -> None:
    # Given a component that dies as controller-runtime's managers do when the machine has no
    # inotify instance left for their certificate watchers
    plane = ControlPlane(state=tmp_path, token="t")
    (tmp_path / "log").mkdir()
    go_error = '{"level":"error","msg":"Could not run manager","error":"too many open files"}'
    process = plane._spawn("kueue", [sys.executable, "-c", f"print({go_error!r}); exit(1)"])

    # When the plane waits for it
    with pytest.raises(ControlPlaneError) as failure:
        plane._wait(process, lambda: False, timeout=10)

    # Then the error names the limit and the command, before the component's own log
    message = str(failure.value)
    first_line = message.splitlines()[0]
    assert first_line.startswith("kueue exited (1):")
    assert "fs.inotify.max_user_instances" in first_line
    assert "sudo sysctl -w fs.inotify.max_user_instances=1024" in first_line
    assert "too many open files" in message.splitlines()[1]


def test_a_component_that_fails_otherwise_gets_its_log_without_the_inotify_hint(
    tmp_path: Path,
) -> None:
    plane = ControlPlane(state=tmp_path, token="t")
    (tmp_path / "log").mkdir()
    process = plane._spawn(
        "etcd", [sys.executable, "-c", "print('address already in use'); exit(1)"]
    )
    with pytest.raises(ControlPlaneError) as failure:
        plane._wait(process, lambda: False, timeout=10)
    assert "inotify" not in str(failure.value)
    assert "address already in use" in str(failure.value)
