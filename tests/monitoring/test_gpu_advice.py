"""Advice from demand on the GPU stack page (docs/gpu-operator.md#advice-from-the-queue): a real
Prometheus reading the sandbox's DCGM exporter, a real worker admitting the jobs.

- jobs waiting for 1g.10gb slices the cluster lacks, whole A100s idle → re-partition the
  idle node as all-1g.10gb, with its effect; a busy node is not proposed;
- an empty queue → no advice.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from django.contrib.auth.models import User

from cluster import kube
from gpu_stack.selectors.page import gpu_stack_get
from jobs.models import Job, JobState
from jobs.services.submit import job_submit
from monitoring.idleness import nodes_gpu_use
from tests.conftest import training_spec
from tests.monitoring.prometheus_process import PrometheusProcess
from tests.worker_process import wait_for

pytestmark = pytest.mark.django_db(transaction=True)


MIG_NODE = "gpu-a100-mig-0"


@pytest.fixture
def quick(metrics: PrometheusProcess, settings: Any) -> Iterator[None]:
    """Idle supply decided over 6 s instead of 3 h; the MIG node cordoned back afterwards."""
    settings.GPU_ADVICE_WINDOW_MINUTES = 0.1
    yield
    kube.cordon(MIG_NODE, unschedulable=False)


def test_no_advice_while_no_job_waits_for_slices(users: dict[str, User], quick: None) -> None:
    # Given whole A100s that DCGM shows idle for the window
    wait_for(
        lambda: (
            {"gpu-a100-0", "gpu-a100-1"}
            <= {n for n, use in nodes_gpu_use(window_seconds=6).items() if use.idle}
        ),
        timeout=60,
        interval=1,
    )
    # When nothing waits for slices, there is nothing to advise
    stack = gpu_stack_get()
    assert stack.advice == [] and stack.advice_error == ""


def test_jobs_waiting_for_slices_beside_idle_whole_gpus_get_advice(
    users: dict[str, User], quick: None
) -> None:
    alice = users["alice"]
    # Given a busy 8-GPU job on one whole-A100 node (the sandbox's training runs hot)
    busy = job_submit(
        user=alice,
        data=training_spec(
            name="busy",
            gpu={"count": 8, "product": "NVIDIA-A100-SXM4-80GB"},
            env={"SANDBOX_DURATION": "1h"},
        ),
    )
    busy = wait_for(
        lambda: (j := Job.objects.get(pk=busy.pk)).state == JobState.RUNNING and j, timeout=60
    )
    busy_node = busy.placement["pods"][0]["node"]
    idle_node = ({"gpu-a100-0", "gpu-a100-1"} - {busy_node}).pop()
    # ...once DCGM shows its GPUs busy (the first samples of a starting job are still idle)
    wait_for(
        lambda: (use := nodes_gpu_use(window_seconds=6).get(busy_node)) and not use.idle,
        timeout=60,
        interval=1,
    )
    # ...and the only node with 1g.10gb slices cordoned, so two jobs asking for them wait
    kube.cordon(MIG_NODE)
    waiting = [
        job_submit(
            user=alice,
            data=training_spec(
                name=f"slices-{i}", gpu={"count": 2, "sharing": "mig", "mig_profile": "1g.10gb"}
            ),
        )
        for i in range(2)
    ]
    wait_for(
        lambda: all(Job.objects.get(pk=j.pk).state == JobState.PENDING for j in waiting),
        timeout=60,
    )
    # When the admin's page is read once DCGM has a window of samples for both nodes
    stack = wait_for(lambda: (s := gpu_stack_get()).advice and s, timeout=60, interval=1)
    # Then one piece of advice: the idle node re-partitioned for the waiting slices
    (advice,) = stack.advice
    assert advice.node == idle_node
    assert (advice.layout, advice.gained, advice.lost) == ("all-1g.10gb", 56, 8)
    assert (advice.demand.jobs, advice.demand.units) == (2, 4)
    assert advice.words.startswith("2 jobs (")
    assert (
        f"need nvidia.com/mig-1g.10gb; {idle_node} has 8 whole GPUs at 0 % use for 6 s: "
        "re-partition it as all-1g.10gb → +56 1g.10gb slices, −8 whole GPUs; "
        "the queue for 1g.10gb clears." in advice.words
    )
