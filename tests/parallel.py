"""The suite across several processes (``make test``: pytest-xdist, one test module per
process at a time). Loaded with ``-p tests.parallel`` before Django reads its settings.

- Each process gets a Redis database of its own, as pytest-django gives it a test database
  of its own (``test_<name>_gw<N>``): the broker and the throttle counters of one never
  reach another's tests.
- The modules that take longest go first (the longest-first rule): the last ones handed
  out are short, so no process is left running one long module while the others idle.
"""

from __future__ import annotations

import os
import re

import pytest

# Measured on the real local cluster (docs/performance.md#the-test-suite), longest first;
# every other module follows in its usual order.
LONGEST_FIRST = (
    "tests/integration/test_sharing_engines.py",
    "tests/integration/test_kueue_mode.py",
    "tests/security/test_api_fuzz.py",
    "tests/monitoring/test_workspace_idle.py",
    "tests/integration/test_tracker.py",
    "tests/integration/test_resilience.py",
    "tests/localcluster/test_restart.py",
    "tests/integration/test_workspaces.py",
    "tests/integration/test_workspace_browser.py",
    "tests/monitoring/test_gpu_failures.py",
    "tests/localcluster/test_nodes.py",
    "tests/localcluster/test_control_plane.py",
    "tests/localcluster/test_kubeflow.py",
    "tests/integration/test_job_lifecycle.py",
    "tests/web/test_accessibility.py",
    "tests/monitoring/test_idle_policy.py",
    "tests/sandbox/test_faults.py",
)


def _own_redis_database() -> None:
    worker = re.fullmatch(r"gw(\d+)", os.environ.get("PYTEST_XDIST_WORKER", ""))
    url = os.environ.get("REDIS_URL", "")
    base = re.fullmatch(r"(redis://[^/]+/)(\d+)", url)
    if worker is None or base is None:
        return
    os.environ["REDIS_URL"] = f"{base[1]}{(int(base[2]) - int(worker[1])) % 16}"


_own_redis_database()


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    rank = {path: i for i, path in enumerate(LONGEST_FIRST)}

    def order(item: pytest.Item) -> int:
        path = item.nodeid.split("::", 1)[0]
        return rank.get(path, len(rank))

    items.sort(key=order)  # stable: a module's tests keep their order
