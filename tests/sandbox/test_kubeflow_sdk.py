"""Kubeflow's own Python SDK (``kubeflow`` on PyPI, its ``TrainerClient``) against the
sandbox, unchanged: it lists the runtimes, submits a TrainJob, waits for it, reads its steps
and logs and deletes it, as it would on a cluster with Kubeflow Trainer installed."""

from __future__ import annotations

import pytest
from kubeflow.trainer import CustomTrainerContainer, KubernetesBackendConfig, TrainerClient
from kubeflow.trainer.options import Name, TrainerArgs, TrainerCommand

from tests.sandbox.conftest import wait_for
from tests.sandbox_process import SandboxProcess


@pytest.fixture
def trainer(sandbox: SandboxProcess, namespace: str) -> TrainerClient:
    config = KubernetesBackendConfig(namespace=namespace, config_file=str(sandbox.kubeconfig))
    return TrainerClient(backend_config=config)


def test_the_sdk_lists_the_runtimes(trainer: TrainerClient) -> None:
    runtimes = {r.name: r for r in trainer.list_runtimes()}
    torch = runtimes["torch-distributed"]
    assert torch.trainer.framework == "torch"
    assert torch.trainer.image == "pytorch/pytorch:2.13.0-cuda13.0-cudnn9-runtime"
    assert trainer.get_runtime("torch-distributed").name == "torch-distributed"


def test_the_sdk_trains_waits_and_reads_the_logs(trainer: TrainerClient) -> None:
    # Given a command in a container on two nodes (CPU only: the sandbox's GPU nodes are
    # tainted, and the SDK's plain call adds no toleration)
    name = trainer.train(
        runtime="torch-distributed",
        trainer=CustomTrainerContainer(
            image="nvcr.io/nvidia/pytorch:24.05-py3",
            num_nodes=2,
            resources_per_node={"cpu": 2},
            env={"SANDBOX_DURATION": "120s"},
        ),
        options=[Name("sdk-run"), TrainerCommand(["torchrun"]), TrainerArgs(["train.py"])],
    )
    assert name == "sdk-run"
    # When it runs, the SDK sees it running on both nodes, with their CPUs
    job = trainer.wait_for_job_status(name, status={"Running"}, timeout=60, polling_interval=1)
    assert job.num_nodes == 2
    assert sorted(s.name for s in job.steps) == ["node-0", "node-1"]
    assert {(s.device, s.device_count) for s in job.steps} == {("cpu", "2")}
    # ...reads rank 0's log, the sandbox trainer's
    lines = wait_for(lambda: list(trainer.get_job_logs(name, step="node-0")), timeout=20)
    assert any("torch.distributed" in line for line in lines)
    # ...and sees it complete
    done = trainer.wait_for_job_status(name, status={"Complete"}, timeout=60, polling_interval=1)
    assert done.status == "Complete"
    assert [j.name for j in trainer.list_jobs()] == ["sdk-run"]
    trainer.delete_job(name)
    wait_for(lambda: not trainer.list_jobs(), timeout=20)


def test_a_failing_run_is_failed_for_the_sdk(trainer: TrainerClient) -> None:
    name = trainer.train(
        runtime="torch-distributed",
        trainer=CustomTrainerContainer(
            image="nvcr.io/nvidia/pytorch:24.05-py3",
            num_nodes=1,
            resources_per_node={"cpu": 1},
            env={"SANDBOX_DURATION": "20s", "SANDBOX_EXIT_CODE": "2"},
        ),
        options=[TrainerCommand(["python", "train.py"])],
    )
    with pytest.raises(RuntimeError, match="Failed"):
        trainer.wait_for_job_status(name, status={"Complete"}, timeout=60, polling_interval=1)
    assert trainer.get_job(name).status == "Failed"
