"""Kubeflow Trainer's TrainJob on the sandbox, as a cluster with Trainer v2.3 and JobSet runs
it, driven with a real kubectl: the shipped `torch-distributed` runtime, a TrainJob becoming
a JobSet of its name with the trainer's image, command, resources and torchrun's env, the
runtime patches merged into its pods, `jobsStatus` and `trainerStatus` while it runs,
`Complete` and `Failed` copied from the JobSet, suspend both ways, the webhook's refusals,
and deletion taking the JobSet, its Jobs and pods along."""

from __future__ import annotations

import json
from typing import Any

from tests.sandbox.conftest import rows
from tests.sandbox.test_jobset import until

TRAINJOB = """
apiVersion: trainer.kubeflow.org/v1alpha1
kind: TrainJob
metadata: {{name: {name}}}
spec:
  suspend: {suspend}
  runtimeRef: {{name: torch-distributed}}
  trainer:
    image: nvcr.io/nvidia/pytorch:24.05-py3
    command: [torchrun, train.py]
    numNodes: 2
    env:
    - {{name: SANDBOX_DURATION, value: "{duration}"}}
    - {{name: SANDBOX_EXIT_CODE, value: "{exit_code}"}}
    resourcesPerNode: {{limits: {{cpu: 2, nvidia.com/gpu: 1}}, requests: {{cpu: 2}}}}
  runtimePatches:
  - manager: gpu-portal.dev/manager
    trainingRuntimeSpec:
      template:
        spec:
          replicatedJobs:
          - name: node
            template:
              spec:
                template:
                  metadata:
                    labels: {{team: vision}}
                    annotations:
                      sandbox.gpu-portal.dev/duration: "{duration}"
                      sandbox.gpu-portal.dev/exit-code: "{exit_code}"
                  spec:
                    tolerations: [{{key: nvidia.com/gpu, operator: Exists, effect: NoSchedule}}]
                    securityContext: {{runAsNonRoot: true, runAsUser: 1000}}
                    containers:
                    - name: node
                      securityContext: {{allowPrivilegeEscalation: false}}
"""


def get(kubectl, ns: str, name: str, kind: str = "trainjob") -> dict[str, Any]:  # type: ignore[no-untyped-def]
    return dict(json.loads(kubectl("get", kind, name, "-n", ns, "-o", "json")))


def conditions(obj: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["type"]: c for c in (obj.get("status") or {}).get("conditions") or []}


def pods(kubectl, ns: str, name: str) -> list[dict[str, Any]]:  # type: ignore[no-untyped-def]
    found = kubectl(
        "get", "pods", "-n", ns, "-l", f"jobset.sigs.k8s.io/jobset-name={name}", "-o", "json"
    )
    return list(json.loads(found)["items"])


def apply(kubectl, ns: str, name: str, *, suspend: bool = False, duration: str = "60s",
          exit_code: int = 0) -> None:  # type: ignore[no-untyped-def]  # fmt: skip
    manifest = TRAINJOB.format(
        name=name, suspend=str(suspend).lower(), duration=duration, exit_code=exit_code
    )
    kubectl("apply", "-n", ns, "-f", "-", stdin=manifest)


def test_the_cluster_ships_the_torch_distributed_runtime(kubectl) -> None:  # type: ignore[no-untyped-def]
    table = rows(kubectl("get", "clustertrainingruntimes"))
    assert table[0] == ["NAME", "AGE"] and table[1][0] == "torch-distributed"
    runtime = json.loads(
        kubectl("get", "clustertrainingruntime", "torch-distributed", "-o", "json")
    )
    assert runtime["metadata"]["labels"]["trainer.kubeflow.org/framework"] == "torch"
    node = runtime["spec"]["template"]["spec"]["replicatedJobs"][0]
    assert node["name"] == "node"
    assert node["template"]["metadata"]["labels"] == {
        "trainer.kubeflow.org/trainjob-ancestor-step": "trainer"
    }


def test_a_trainjob_runs_as_a_jobset_of_its_trainer_and_completes(kubectl, namespace) -> None:  # type: ignore[no-untyped-def]
    # 20 s of real time at the sandbox's speed: its progress is read while it runs, even on
    # a loaded machine (the default 60 s is one second)
    apply(kubectl, namespace, "llm", duration="1200s")
    # The JobSet of its name, owned by it, with one Job of numNodes pods
    jobset = until(
        lambda: json.loads(kubectl("get", "jobsets", "-n", namespace, "-o", "json"))["items"]
    )
    assert [j["metadata"]["name"] for j in jobset] == ["llm"]
    assert jobset[0]["metadata"]["ownerReferences"][0]["kind"] == "TrainJob"
    job = get(kubectl, namespace, "llm-node-0", "job")
    assert job["spec"]["parallelism"] == job["spec"]["completions"] == 2
    found = until(lambda: len(p := pods(kubectl, namespace, "llm")) == 2 and p)
    # ...each pod the trainer's container, the runtime patch's pod settings and torchrun's env
    pod = next(p for p in found if p["metadata"]["annotations"][
        "batch.kubernetes.io/job-completion-index"] == "1")  # fmt: skip
    node = pod["spec"]["containers"][0]
    assert (node["name"], node["image"], node["command"]) == (
        "node", "nvcr.io/nvidia/pytorch:24.05-py3", ["torchrun", "train.py"]
    )  # fmt: skip
    assert node["resources"]["limits"] == {"cpu": "2", "nvidia.com/gpu": "1"}
    env = {e["name"]: e.get("value", e.get("valueFrom")) for e in node["env"]}
    assert env["PET_NNODES"] == "2" and env["PET_NPROC_PER_NODE"] == "auto"
    assert env["PET_MASTER_ADDR"] == "llm-node-0-0.llm" and env["PET_MASTER_PORT"] == "29500"
    assert env["PET_NODE_RANK"] == {
        "fieldRef": {
            "fieldPath": "metadata.annotations['batch.kubernetes.io/job-completion-index']"
        }
    }
    assert node["securityContext"] == {"allowPrivilegeEscalation": False}
    assert pod["spec"]["securityContext"] == {"runAsNonRoot": True, "runAsUser": 1000}
    assert pod["metadata"]["labels"]["team"] == "vision"
    assert pod["metadata"]["labels"]["jobset.sigs.k8s.io/replicatedjob-name"] == "node"
    assert pod["spec"]["hostname"] == "llm-node-0-1" and pod["spec"]["subdomain"] == "llm"
    # While it runs: jobsStatus and the trainer's progress
    status = until(
        lambda: (
            (s := get(kubectl, namespace, "llm").get("status") or {})
            .get("trainerStatus", {})
            .get("progressPercentage")
            and s
        ),
        30,
    )
    assert status, "the TrainJob reported no progress while it ran"
    assert status["jobsStatus"][0]["name"] == "node"
    progress = status["trainerStatus"]
    assert 0 < progress["progressPercentage"] < 100
    assert progress["estimatedRemainingSeconds"] >= 0 and progress["lastUpdatedTime"]
    assert {m["name"] for m in progress["metrics"]} == {"step", "total"}
    # And it completes as its JobSet does
    done = until(lambda: conditions(get(kubectl, namespace, "llm")).get("Complete"), 60)
    assert (done["status"], done["reason"], done["message"]) == (
        "True", "AllJobsCompleted", "jobset completed successfully"
    )  # fmt: skip
    assert rows(kubectl("get", "trainjobs", "-n", namespace))[1][:2] == ["llm", "Complete"]


def test_a_failing_node_fails_the_trainjob_as_its_jobset(kubectl, namespace) -> None:  # type: ignore[no-untyped-def]
    apply(kubectl, namespace, "broken", duration="10s", exit_code=3)
    failed = until(lambda: conditions(get(kubectl, namespace, "broken")).get("Failed"), 30)
    assert failed["reason"] == "FailedJobs"
    assert failed["message"] == (
        "jobset failed due to one or more job failures (first failed job: broken-node-0)"
    )


def test_a_suspended_trainjob_has_no_pods_until_resumed(kubectl, namespace) -> None:  # type: ignore[no-untyped-def]
    apply(kubectl, namespace, "later", suspend=True)
    held = until(lambda: conditions(get(kubectl, namespace, "later")).get("Suspended"))
    assert (held["status"], held["reason"], held["message"]) == (
        "True", "Suspended", "TrainJob is suspended"
    )  # fmt: skip
    assert get(kubectl, namespace, "later", "jobset")["spec"]["suspend"] is True
    assert pods(kubectl, namespace, "later") == []
    kubectl("patch", "trainjob", "later", "-n", namespace, "--type=merge",
            "-p", '{"spec":{"suspend":false}}')  # fmt: skip
    assert until(lambda: len(pods(kubectl, namespace, "later")) == 2)
    resumed = conditions(get(kubectl, namespace, "later"))["Suspended"]
    assert (resumed["status"], resumed["reason"]) == ("False", "Resumed")


def test_deleting_a_trainjob_takes_its_jobset_jobs_and_pods(kubectl, namespace) -> None:  # type: ignore[no-untyped-def]
    apply(kubectl, namespace, "gone", duration="3600s")
    until(lambda: len(pods(kubectl, namespace, "gone")) == 2)
    kubectl("delete", "trainjob", "gone", "-n", namespace)
    assert until(
        lambda: (
            not pods(kubectl, namespace, "gone")
            and not json.loads(kubectl("get", "jobsets,jobs", "-n", namespace, "-o", "json"))[
                "items"
            ]
        ),
        30,
    )


def test_the_webhook_refuses_a_missing_runtime_and_torchruns_env(kubectl, namespace) -> None:  # type: ignore[no-untyped-def]
    missing = TRAINJOB.format(name="missing", suspend="false", duration="1s", exit_code=0).replace(
        "torch-distributed", "no-such-runtime"
    )
    out = kubectl("apply", "-n", namespace, "-f", "-", stdin=missing, check=False)
    assert 'admission webhook "validate.trainjob.trainer.kubeflow.org" denied the request' in out
    assert "specified clusterTrainingRuntime must be created before the TrainJob" in out
    reserved = TRAINJOB.format(
        name="reserved", suspend="false", duration="1s", exit_code=0
    ).replace(
        "- {name: SANDBOX_DURATION",
        "- {name: PET_NNODES, value: '9'}\n    - {name: SANDBOX_DURATION",
    )
    out = kubectl("apply", "-n", namespace, "-f", "-", stdin=reserved, check=False)
    assert "must not have reserved envs, invalid envs configured: [PET_NNODES]" in out


def test_kubectl_explains_the_trainjob_spec(kubectl) -> None:  # type: ignore[no-untyped-def]
    out = kubectl("explain", "trainjob.spec.trainer")
    assert "numNodes" in out and "resourcesPerNode" in out
    assert "runtimePatches" in kubectl("explain", "trainjob.spec")
