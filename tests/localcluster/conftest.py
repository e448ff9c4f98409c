"""One local cluster (the real control plane, simulated GPU nodes) for the tests of this
folder that do not stop or break it for good."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.sandbox_process import SandboxProcess, start_sandbox


@pytest.fixture(scope="session")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SandboxProcess]:
    proc = start_sandbox(
        tmp_path_factory.mktemp("localcluster"), profile="small", speed=10, control_plane="real"
    )
    yield proc
    proc.stop(timeout=30)
