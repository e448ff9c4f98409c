"""PyTorchJob on the sandbox, as a cluster with Kubeflow's training operator runs it,
driven with a real kubectl: `kubectl get pytorchjobs` with the operator's columns and
`kubectl explain`, a pod and a headless Service per replica with the operator's names,
labels and torchrun's env, the conditions from Created to Succeeded, a failing rank
failing the job with its exit code, suspend, and deletion taking every pod along."""

from __future__ import annotations

import json
import re
from typing import Any

from tests.sandbox.conftest import rows
from tests.sandbox.test_jobset import until

PYTORCHJOB = """
apiVersion: kubeflow.org/v1
kind: PyTorchJob
metadata: {{name: {name}}}
spec:
  runPolicy: {{suspend: {suspend}}}
  pytorchReplicaSpecs:
    Master:
      replicas: 1
      restartPolicy: OnFailure
      template:
        metadata:
          annotations: {{sandbox.gpu-portal.dev/duration: "{duration}"}}
        spec:
          containers:
          - name: pytorch
            image: busybox
            resources: {{requests: {{cpu: 100m}}}}
    Worker:
      replicas: 2
      restartPolicy: {worker_policy}
      template:
        metadata:
          annotations:
            sandbox.gpu-portal.dev/duration: "{duration}"
            sandbox.gpu-portal.dev/exit-code: "{exit_code}"
        spec:
          containers:
          - name: pytorch
            image: busybox
            resources: {{requests: {{cpu: 100m}}}}
"""


def get(kubectl, ns: str, name: str) -> dict[str, Any]:  # type: ignore[no-untyped-def]
    return dict(json.loads(kubectl("get", "pytorchjob", name, "-n", ns, "-o", "json")))


def conditions(obj: dict[str, Any]) -> dict[str, str]:
    return {c["type"]: c["status"] for c in (obj.get("status") or {}).get("conditions") or []}


def pods(kubectl, ns: str, name: str) -> list[dict[str, Any]]:  # type: ignore[no-untyped-def]
    found = kubectl(
        "get", "pods", "-n", ns, "-l", f"training.kubeflow.org/job-name={name}", "-o", "json"
    )
    return list(json.loads(found)["items"])


def apply(kubectl, ns: str, name: str, *, suspend: bool = False, duration: str = "30s",
          exit_code: int = 0, worker_policy: str = "OnFailure") -> None:  # type: ignore[no-untyped-def]  # fmt: skip
    manifest = PYTORCHJOB.format(
        name=name, suspend=str(suspend).lower(), duration=duration, exit_code=exit_code,
        worker_policy=worker_policy,
    )  # fmt: skip
    kubectl("apply", "-n", ns, "-f", "-", stdin=manifest)


def test_a_pytorchjob_runs_a_pod_per_replica_with_torchruns_env_and_succeeds(  # type: ignore[no-untyped-def]
    kubectl, namespace
) -> None:
    # 20 s of real time at the sandbox's speed: long enough to be seen running on a loaded
    # machine (its 30 s default is half a second)
    apply(kubectl, namespace, "ddp", duration="1200s")
    # A pod and a headless Service per replica, with the operator's names and labels
    found = until(lambda: len(p := pods(kubectl, namespace, "ddp")) == 3 and p)
    by_name = {p["metadata"]["name"]: p for p in found}
    assert sorted(by_name) == ["ddp-master-0", "ddp-worker-0", "ddp-worker-1"]
    labels = by_name["ddp-worker-1"]["metadata"]["labels"]
    assert labels["training.kubeflow.org/replica-type"] == "worker"
    assert labels["training.kubeflow.org/replica-index"] == "1"
    assert by_name["ddp-master-0"]["metadata"]["labels"]["training.kubeflow.org/job-role"] == (
        "master"
    )
    services = rows(kubectl("get", "services", "-n", namespace))[1:]
    assert {"ddp-master-0", "ddp-worker-0", "ddp-worker-1"} <= {r[0] for r in services}
    # ...and torchrun's env: the master's address and port, world size, each one's rank
    env = {e["name"]: e["value"] for e in by_name["ddp-worker-1"]["spec"]["containers"][0]["env"]}
    assert env["MASTER_ADDR"] == env["PET_MASTER_ADDR"] == "ddp-master-0"
    assert env["MASTER_PORT"] == env["PET_MASTER_PORT"] == "23456"
    assert (env["WORLD_SIZE"], env["RANK"], env["PET_NNODES"], env["PET_NODE_RANK"]) == (
        "3", "2", "3", "2",
    )  # fmt: skip
    # Conditions as the operator writes them, and kubectl's columns
    running = until(
        lambda: conditions(j := get(kubectl, namespace, "ddp")).get("Running") == "True" and j
    )
    assert running, "the PyTorchJob was never seen Running"
    assert conditions(running)["Created"] == "True"
    table = rows(kubectl("get", "pytorchjobs", "-n", namespace))
    assert table[0] == ["NAME", "STATE", "AGE"] and table[1][:2] == ["ddp", "Running"]
    assert re.fullmatch(r"\d+s|\d+m\d*s?", table[1][2]), table[1]  # an age, as kubectl shows
    done = until(
        lambda: conditions(j := get(kubectl, namespace, "ddp")).get("Succeeded") == "True" and j,
        timeout=60,
    )
    assert conditions(done)["Running"] == "False"
    assert done["status"]["replicaStatuses"]["Master"]["succeeded"] == 1
    assert "completionTime" in done["status"]
    # Deleting it takes every pod and Service along
    kubectl("delete", "pytorchjob", "ddp", "-n", namespace)
    assert until(lambda: not pods(kubectl, namespace, "ddp"))


def test_a_failing_rank_fails_the_pytorchjob_with_its_exit_code(kubectl, namespace) -> None:  # type: ignore[no-untyped-def]
    apply(kubectl, namespace, "bad", duration="5s", exit_code=3, worker_policy="Never")
    failed = until(
        lambda: conditions(j := get(kubectl, namespace, "bad")).get("Failed") == "True" and j,
        timeout=40,
    )
    failure = next(c for c in failed["status"]["conditions"] if c["type"] == "Failed")
    assert failure["reason"] == "PyTorchJobFailed"
    assert "Worker replica(s) failed" in failure["message"] and "Exit code 3" in failure["message"]


def test_a_suspended_pytorchjob_has_no_pods_until_resumed(kubectl, namespace) -> None:  # type: ignore[no-untyped-def]
    apply(kubectl, namespace, "later", suspend=True)
    held = until(
        lambda: conditions(j := get(kubectl, namespace, "later")).get("Suspended") == "True" and j
    )
    assert conditions(held)["Running"] == "False"
    assert not pods(kubectl, namespace, "later")
    kubectl("patch", "pytorchjob", "later", "-n", namespace, "--type=merge",
            "-p", '{"spec": {"runPolicy": {"suspend": false}}}')  # fmt: skip
    assert until(lambda: len(pods(kubectl, namespace, "later")) == 3)
    assert conditions(get(kubectl, namespace, "later"))["Suspended"] == "False"


def test_kubectl_explains_the_pytorchjob_spec(kubectl) -> None:  # type: ignore[no-untyped-def]
    explained = kubectl("explain", "pytorchjob.spec")
    assert "pytorchReplicaSpecs" in explained and "runPolicy" in explained
