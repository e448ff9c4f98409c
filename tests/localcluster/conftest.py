"""The tests of this folder use the test process's local cluster (``tests/conftest.py``);
those that stop or break it for good start their own."""

from __future__ import annotations

import pytest

from tests.sandbox_process import SandboxProcess


@pytest.fixture
def cluster(local_cluster: SandboxProcess) -> SandboxProcess:
    return local_cluster
