"""Kubeflow's operators for real: a PyTorchJob run by the training operator, a TrainJob run
by Trainer through a JobSet, each to success on the simulated GPU nodes."""

from __future__ import annotations

import json
from typing import Any

from tests.localcluster.kube import apply, condition, kubectl, namespace, pods, wait_for
from tests.sandbox_process import SandboxProcess

GPU_TOLERATION = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
IMAGE = "nvcr.io/nvidia/pytorch:24.05-py3"


def replica(duration: str) -> dict[str, Any]:
    return {
        "replicas": 1,
        "restartPolicy": "OnFailure",
        "template": {
            "metadata": {"annotations": {"sandbox.gpu-portal.dev/duration": duration}},
            "spec": {
                "tolerations": [GPU_TOLERATION],
                "containers": [
                    {
                        "name": "pytorch",
                        "image": IMAGE,
                        "resources": {"limits": {"nvidia.com/gpu": 1}},
                    }
                ],
            },
        },
    }


def test_a_pytorchjob_runs_master_and_worker_to_success(cluster: SandboxProcess) -> None:
    # Given a PyTorchJob of a master and a worker, one GPU each
    ns = namespace(cluster)
    apply(
        cluster,
        {
            "apiVersion": "kubeflow.org/v1",
            "kind": "PyTorchJob",
            "metadata": {"name": "ddp", "namespace": ns},
            "spec": {"pytorchReplicaSpecs": {"Master": replica("60s"), "Worker": replica("60s")}},
        },
    )

    # When the training operator has made its pods and they have run
    def job() -> dict[str, Any]:
        found: dict[str, Any] = json.loads(
            kubectl(cluster, "get", "pytorchjob", "ddp", "-n", ns, "-o", "json")
        )
        return found

    wait_for("the PyTorchJob succeeded", lambda: condition(job(), "Succeeded") == "True")

    # Then both replicas ran, each with the rendezvous the operator wires in
    ran = {p["metadata"]["name"]: p for p in pods(cluster, ns)}
    assert set(ran) == {"ddp-master-0", "ddp-worker-0"}
    env = {e["name"]: e.get("value") for e in ran["ddp-worker-0"]["spec"]["containers"][0]["env"]}
    assert env["MASTER_ADDR"] == "ddp-master-0" and env["WORLD_SIZE"] == "2"
    # The operator calls the job Succeeded once the master has; the worker, which started
    # after its init container found the master, finishes its own minute a little later
    wait_for(
        "both replicas succeeded",
        lambda: all(p["status"]["phase"] == "Succeeded" for p in pods(cluster, ns)),
    )


def test_a_trainjob_runs_through_trainer_and_jobset_to_completion(cluster: SandboxProcess) -> None:
    # Given a TrainJob of two nodes on Trainer's shipped torch-distributed runtime
    ns = namespace(cluster)
    pod = {
        "metadata": {"annotations": {"sandbox.gpu-portal.dev/duration": "60s"}},
        "spec": {"tolerations": [GPU_TOLERATION]},
    }
    node = {"name": "node", "template": {"spec": {"template": pod}}}
    apply(
        cluster,
        {
            "apiVersion": "trainer.kubeflow.org/v1alpha1",
            "kind": "TrainJob",
            "metadata": {"name": "finetune", "namespace": ns},
            "spec": {
                "runtimeRef": {"name": "torch-distributed"},
                "trainer": {
                    "image": IMAGE,
                    "numNodes": 2,
                    "resourcesPerNode": {"limits": {"nvidia.com/gpu": 1}},
                },
                # What a platform adds to a runtime's pods (Trainer 2.2's runtime patches).
                "runtimePatches": [
                    {
                        "manager": "gpu-portal.dev/tests",
                        "trainingRuntimeSpec": {"template": {"spec": {"replicatedJobs": [node]}}},
                    }
                ],
            },
        },
    )

    # When Trainer has made its JobSet, JobSet its Jobs, and the pods have run
    def train_job() -> dict[str, Any]:
        found: dict[str, Any] = json.loads(
            kubectl(cluster, "get", "trainjob", "finetune", "-n", ns, "-o", "json")
        )
        return found

    wait_for(
        "the TrainJob complete", lambda: condition(train_job(), "Complete") == "True", timeout=90
    )

    # Then the JobSet completed with one pod per node, each on a GPU
    jobset = json.loads(kubectl(cluster, "get", "jobset", "finetune", "-n", ns, "-o", "json"))
    assert condition(jobset, "Completed") == "True"
    trainers = [p for p in pods(cluster, ns) if "node" in p["metadata"]["name"]]
    assert len(trainers) == 2
    assert all(p["status"]["phase"] == "Succeeded" for p in trainers)
