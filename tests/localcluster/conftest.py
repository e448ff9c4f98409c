"""The tests of this folder use the test process's local cluster (``tests/conftest.py``);
those that stop or break it for good start their own. The namespaces a test made go after
it, and with them its jobs and their GPUs, for the tests after it."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.localcluster.kube import TEST_NAMESPACE, kubectl
from tests.sandbox_process import SandboxProcess


@pytest.fixture
def cluster(local_cluster: SandboxProcess) -> Iterator[SandboxProcess]:
    yield local_cluster
    kubectl(local_cluster, "delete", "namespace", "-l", TEST_NAMESPACE, "--wait=false")
