"""The sandbox's Kueue at work, driven with a real kubectl as a platform engineer would,
without the portal: Jobs labelled for a LocalQueue are suspended, get Workloads, are
admitted within their ClusterQueue's quota or by borrowing from its cohort, wait with
Kueue's words when nothing fits, and are preempted the way Kueue picks victims when a
lender reclaims its quota; then they run again by themselves."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from tests.sandbox.conftest import rows

QUEUES = """
apiVersion: kueue.x-k8s.io/v1beta2
kind: ResourceFlavor
metadata: {{name: a100-{s}}}
spec:
  nodeLabels: {{nvidia.com/gpu.product: NVIDIA-A100-SXM4-80GB}}
  tolerations: [{{key: nvidia.com/gpu, operator: Exists, effect: NoSchedule}}]
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: ResourceFlavor
metadata: {{name: default-{s}}}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: ClusterQueue
metadata: {{name: {team}-{s}}}
spec:
  cohortName: research-{s}
  namespaceSelector: {{}}
  preemption: {{reclaimWithinCohort: Any, withinClusterQueue: LowerPriority}}
  resourceGroups:
  - coveredResources: [cpu, memory]
    flavors:
    - name: default-{s}
      resources: [{{name: cpu, nominalQuota: 64}}, {{name: memory, nominalQuota: 256Gi}}]
  - coveredResources: [nvidia.com/gpu]
    flavors:
    - name: a100-{s}
      resources: [{{name: nvidia.com/gpu, nominalQuota: {gpus}}}]
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: LocalQueue
metadata: {{name: {team}, namespace: {ns}}}
spec: {{clusterQueue: {team}-{s}}}
"""

JOB = """
apiVersion: batch/v1
kind: Job
metadata:
  name: {name}
  labels: {{kueue.x-k8s.io/queue-name: {queue}}}
spec:
  parallelism: 1
  completions: 1
  template:
    metadata:
      annotations: {{sandbox.gpu-portal.dev/duration: "{duration}"}}
    spec:
      restartPolicy: Never
      priorityClassName: {priority}
      containers:
      - name: main
        image: busybox
        resources:
          limits: {{nvidia.com/gpu: {gpus}, cpu: "1", memory: 1Gi}}
          requests: {{cpu: "1", memory: 1Gi}}
"""

PRIORITIES = """
apiVersion: scheduling.k8s.io/v1
kind: PriorityClass
metadata: {{name: {name}}}
value: {value}
"""


def until(check: Callable[[], Any], timeout: float = 20.0) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value or time.monotonic() > deadline:
            return value
        time.sleep(0.2)


@pytest.fixture
def teams(kubectl) -> Iterator[dict[str, str]]:  # type: ignore[no-untyped-def]
    """Two teams' namespaces, ClusterQueues (vision 8 GPUs, robotics 4) in one cohort."""
    suffix = uuid.uuid4().hex[:6]
    spaces = {team: f"{team}-{suffix}" for team in ("vision", "robotics")}
    for team, gpus in (("vision", 8), ("robotics", 4)):
        kubectl("create", "namespace", spaces[team])
        kubectl(
            "apply", "-f", "-", stdin=QUEUES.format(s=suffix, team=team, gpus=gpus, ns=spaces[team])
        )
    for name, value in (("kq-low", 100), ("kq-high", 1000), ("kq-top", 10000)):
        kubectl("apply", "-f", "-", stdin=PRIORITIES.format(name=name, value=value))
    yield spaces
    for team in spaces:
        kubectl("delete", "namespace", spaces[team], "--wait=false")
        kubectl("delete", "clusterqueue", f"{team}-{suffix}", "--ignore-not-found")


def submit(
    kubectl, ns: str, name: str, gpus: int, priority: str = "kq-low", duration: str = "600s"
) -> None:  # type: ignore[no-untyped-def]
    queue = ns.split("-")[0]
    kubectl(
        "apply", "-n", ns, "-f", "-",
        stdin=JOB.format(name=name, queue=queue, gpus=gpus, priority=priority, duration=duration),
    )  # fmt: skip


def workload(kubectl, ns: str, job: str) -> dict[str, Any]:  # type: ignore[no-untyped-def]
    items = json.loads(kubectl("get", "workloads", "-n", ns, "-o", "json"))["items"]
    found = [w for w in items if w["metadata"]["ownerReferences"][0]["name"] == job]
    return found[0] if found else {}


def condition(obj: dict[str, Any], kind: str) -> dict[str, Any]:
    return next(
        (c for c in (obj.get("status") or {}).get("conditions") or [] if c["type"] == kind), {}
    )


def test_a_queued_job_is_admitted_on_its_flavor_and_runs(kubectl, teams) -> None:  # type: ignore[no-untyped-def]
    ns = teams["vision"]
    submit(kubectl, ns, "train", 4)
    # Kueue's Workload for it, admitted with Kueue's words and the flavors it got
    admitted = until(
        lambda: condition(workload(kubectl, ns, "train"), "Admitted").get("status") == "True"
    )
    assert admitted
    wl = workload(kubectl, ns, "train")
    assert wl["metadata"]["name"].startswith("job-train-")
    assert wl["spec"]["queueName"] == "vision" and wl["spec"]["priority"] == 100
    assert condition(wl, "QuotaReserved")["message"].startswith(
        "Quota reserved in ClusterQueue vision-"
    )
    assert condition(wl, "Admitted")["message"] == "The workload is admitted"
    assignment = wl["status"]["admission"]["podSetAssignments"][0]
    assert assignment["flavors"]["nvidia.com/gpu"].startswith("a100-")
    assert assignment["resourceUsage"]["nvidia.com/gpu"] == "4"
    # And the Job runs, unsuspended with the flavor's node labels
    job = json.loads(kubectl("get", "job", "train", "-n", ns, "-o", "json"))
    assert job["spec"]["suspend"] is False
    assert job["spec"]["template"]["spec"]["nodeSelector"] == {
        "nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB"
    }
    assert until(lambda: "Running" in kubectl("get", "pods", "-n", ns))
    # And the tables say so
    table = rows(kubectl("get", "workloads", "-n", ns))
    assert table[0] == ["NAME", "QUEUE", "RESERVED IN", "ADMITTED", "FINISHED", "AGE"]
    assert table[1][1:4] == ["vision", wl["status"]["admission"]["clusterQueue"], "True"]
    cq = json.loads(kubectl("get", "cq", wl["status"]["admission"]["clusterQueue"], "-o", "json"))
    assert cq["status"]["admittedWorkloads"] == 1
    gpu = next(f for f in cq["status"]["flavorsUsage"] if f["name"].startswith("a100-"))
    assert gpu["resources"] == [{"name": "nvidia.com/gpu", "total": "4", "borrowed": "0"}]


def test_a_team_borrows_then_the_lender_reclaims_from_its_lowest_priority_job(
    kubectl, teams
) -> None:  # type: ignore[no-untyped-def]
    vision, robotics = teams["vision"], teams["robotics"]
    # Given vision running a low and a high-priority job on its own 8 GPUs, then a low one
    # on 4 borrowed from idle robotics
    submit(kubectl, vision, "low", 4, "kq-low")
    submit(kubectl, vision, "high", 4, "kq-high")
    assert until(
        lambda: condition(workload(kubectl, vision, "high"), "Admitted").get("status") == "True"
    )
    submit(kubectl, vision, "borrow", 4, "kq-high")
    assert until(
        lambda: condition(workload(kubectl, vision, "borrow"), "Admitted").get("status") == "True"
    )
    # When robotics submits 4 GPUs of its own nominal quota
    submit(kubectl, robotics, "mine", 4, "kq-low")
    # Then Kueue evicts vision's low-priority job (not the last admitted), once
    evicted = until(
        lambda: condition(workload(kubectl, vision, "low"), "Evicted").get("status") == "True"
    )
    assert evicted
    low = workload(kubectl, vision, "low")
    assert condition(low, "Preempted")["reason"] == "InCohortReclamation"
    assert (
        "due to reclamation within the cohort; preemptor path: /research-"
        in condition(low, "Preempted")["message"]
    )
    assert until(
        lambda: condition(workload(kubectl, robotics, "mine"), "Admitted").get("status") == "True"
    )
    for other in ("high", "borrow"):
        assert condition(workload(kubectl, vision, other), "Evicted").get("status") != "True"
    # And the victim is requeued and waits, saying why in Kueue's words
    waiting = until(
        lambda: condition(workload(kubectl, vision, "low"), "Requeued").get("status") == "True"
    )
    assert waiting
    low = workload(kubectl, vision, "low")
    assert "admission" not in low["status"]
    assert (
        json.loads(kubectl("get", "job", "low", "-n", vision, "-o", "json"))["spec"]["suspend"]
        is True
    )
    pending = until(
        lambda: (
            condition(workload(kubectl, vision, "low"), "QuotaReserved")
            .get("message", "")
            .startswith("couldn't")
        )
    )
    assert pending
    assert condition(workload(kubectl, vision, "low"), "QuotaReserved")["message"].startswith(
        "couldn't assign flavors to pod set main: insufficient unused quota for nvidia.com/gpu "
        "in flavor a100-"
    )


def test_a_finished_job_frees_its_quota(kubectl, teams) -> None:  # type: ignore[no-untyped-def]
    ns = teams["robotics"]
    submit(kubectl, ns, "short", 4, duration="30s")
    submit(kubectl, ns, "next", 4, duration="30s")
    # The second waits for the first (robotics has 4; vision lends 8 only if idle: it is)
    finished = until(
        lambda: condition(workload(kubectl, ns, "short"), "Finished").get("status") == "True", 30
    )
    assert (
        finished and condition(workload(kubectl, ns, "short"), "Finished")["reason"] == "Succeeded"
    )
    assert until(
        lambda: condition(workload(kubectl, ns, "next"), "Admitted").get("status") == "True"
    )


def test_the_visibility_api_gives_each_pending_workloads_position(kubectl, teams) -> None:  # type: ignore[no-untyped-def]
    vision = teams["vision"]
    # Given the cohort's 12 GPUs all held by vision's top-priority jobs, and three more of
    # its jobs waiting (none may preempt them)
    submit(kubectl, vision, "big", 8, "kq-top")
    submit(kubectl, vision, "more", 4, "kq-top")
    assert until(
        lambda: condition(workload(kubectl, vision, "more"), "Admitted").get("status") == "True"
    )
    for name, priority in (
        ("first-low", "kq-low"),
        ("urgent", "kq-high"),
        ("second-low", "kq-low"),
    ):
        submit(kubectl, vision, name, 4, priority)
        # (timestamps have whole seconds; Workloads created within one are ordered by UID)
        until(lambda n=name: workload(kubectl, vision, n), 5)
        time.sleep(1.1)
    cq = workload(kubectl, vision, "big")["status"]["admission"]["clusterQueue"]
    # When a platform engineer asks Kueue's visibility API
    path = f"/apis/visibility.kueue.x-k8s.io/v1beta2/clusterqueues/{cq}/pendingworkloads"
    summary = until(
        lambda: (
            (s := json.loads(kubectl("get", "--raw", path)))["items"] and len(s["items"]) == 3 and s
        )
    )
    # Then the waiting workloads come in Kueue's order: priority, then age
    assert summary["kind"] == "PendingWorkloadsSummary"
    owners = [item["metadata"]["ownerReferences"][0]["name"] for item in summary["items"]]
    assert owners == ["urgent", "first-low", "second-low"]
    assert [i["positionInClusterQueue"] for i in summary["items"]] == [0, 1, 2]
    assert [i["priority"] for i in summary["items"]] == [1000, 100, 100]
    # And the LocalQueue's view, with limit and offset, says the same
    local = (
        f"/apis/visibility.kueue.x-k8s.io/v1beta2/namespaces/{vision}/localqueues/vision/"
        "pendingworkloads?offset=1&limit=1"
    )
    (item,) = json.loads(kubectl("get", "--raw", local))["items"]
    assert item["metadata"]["ownerReferences"][0]["name"] == "first-low"
    assert (item["positionInLocalQueue"], item["localQueueName"]) == (1, "vision")
    missing = kubectl(
        "get",
        "--raw",
        "/apis/visibility.kueue.x-k8s.io/v1beta2/clusterqueues/nope/pendingworkloads",
        check=False,
    )
    assert "NotFound" in missing or "not found" in missing


DEPLOYMENT = """
apiVersion: apps/v1
kind: Deployment
metadata: {{name: {name}}}
spec:
  replicas: {replicas}
  selector: {{matchLabels: {{app: {name}}}}}
  template:
    metadata:
      labels: {{app: {name}, kueue.x-k8s.io/queue-name: {queue}}}
    spec:
      priorityClassName: kq-low
      containers:
      - name: main
        image: busybox
        resources:
          limits: {{nvidia.com/gpu: {gpus}, cpu: "1", memory: 1Gi}}
          requests: {{cpu: "1", memory: 1Gi}}
"""


def test_a_deployments_pods_wait_gated_until_kueue_admits_each(kubectl, teams) -> None:  # type: ignore[no-untyped-def]
    ns = teams["robotics"]  # 4 GPUs of its own; vision's 8 idle in the cohort
    # When a Deployment of 5 pods of 3 GPUs for robotics' queue is created
    kubectl(
        "apply",
        "-n",
        ns,
        "-f",
        "-",
        stdin=DEPLOYMENT.format(name="serve", replicas=5, queue="robotics", gpus=3),
    )

    def pods() -> list[dict[str, Any]]:
        return list(json.loads(kubectl("get", "pods", "-n", ns, "-o", "json"))["items"])

    # Then each pod gets a Workload; the cohort's 12 GPUs admit four, the fifth stays gated
    def settled() -> list[dict[str, Any]] | None:
        found = pods()
        gated = [p for p in found if p["spec"].get("schedulingGates")]
        return found if len(found) == 5 and len(gated) == 1 else None

    found = until(settled, 30)
    assert found, [p["spec"].get("schedulingGates") for p in pods()]
    gated = next(p for p in found if p["spec"].get("schedulingGates"))
    assert gated["spec"]["schedulingGates"] == [{"name": "kueue.x-k8s.io/admission"}]
    scheduled = next(c for c in gated["status"]["conditions"] if c["type"] == "PodScheduled")
    assert (scheduled["status"], scheduled["reason"]) == ("False", "SchedulingGated")
    running = [p for p in found if not p["spec"].get("schedulingGates")]
    assert all(
        p["spec"]["nodeSelector"] == {"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB"}
        for p in running
    )
    workloads = json.loads(kubectl("get", "workloads", "-n", ns, "-o", "json"))["items"]
    assert len(workloads) == 5 and all(
        w["metadata"]["name"].startswith("pod-serve-") for w in workloads
    )
    waiting = [w for w in workloads if "admission" not in w.get("status", {})]
    assert len(waiting) == 1 and condition(waiting[0], "QuotaReserved")["message"].startswith(
        "couldn't assign flavors to pod set main: insufficient unused quota for nvidia.com/gpu"
    )
    # And scaling down frees a pod's quota for the gated one, whose Workload of the gone
    # pod goes too
    kubectl("scale", "-n", ns, "deployment/serve", "--replicas=4")
    assert until(
        lambda: not [p for p in pods() if p["spec"].get("schedulingGates")] and len(pods()) == 4, 30
    )
    assert until(
        lambda: len(json.loads(kubectl("get", "workloads", "-n", ns, "-o", "json"))["items"]) == 4
    )


TRAINJOB = """
apiVersion: trainer.kubeflow.org/v1alpha1
kind: TrainJob
metadata:
  name: {name}
  labels: {{kueue.x-k8s.io/queue-name: {queue}}}
spec:
  runtimeRef: {{name: torch-distributed}}
  trainer:
    image: busybox
    numNodes: 2
    env: [{{name: SANDBOX_DURATION, value: "600s"}}]
    resourcesPerNode:
      limits: {{nvidia.com/gpu: {gpus}, cpu: "1", memory: 1Gi}}
      requests: {{cpu: "1", memory: 1Gi}}
"""


def test_a_trainjob_is_admitted_by_kueue_and_a_reclaim_suspends_and_requeues_it(
    kubectl, teams
) -> None:  # type: ignore[no-untyped-def]
    vision, robotics = teams["vision"], teams["robotics"]
    # Given vision's own 8 GPUs taken, and a TrainJob of 2 nodes × 2 GPUs for its queue
    submit(kubectl, vision, "own", 8, "kq-high")
    assert until(
        lambda: condition(workload(kubectl, vision, "own"), "Admitted").get("status") == "True"
    )
    kubectl(
        "apply", "-n", vision, "-f", "-", stdin=TRAINJOB.format(name="tj", queue="vision", gpus=2)
    )
    # Then Kueue's webhook suspended it, and its Workload has a pod set per replicated job
    wl = until(lambda: workload(kubectl, vision, "tj"))
    assert wl["metadata"]["name"].startswith("trainjob-tj-")
    assert [(p["name"], p["count"]) for p in wl["spec"]["podSets"]] == [("node", 2)]
    # ...admitted on robotics' idle 4 GPUs: its pods run with the flavor's node labels
    admitted = until(
        lambda: condition(workload(kubectl, vision, "tj"), "Admitted").get("status") == "True"
    )
    assert admitted
    pods = until(
        lambda: (
            len(
                p := [
                    x
                    for x in json.loads(kubectl("get", "pods", "-n", vision, "-o", "json"))["items"]
                    if x["metadata"]["labels"].get("jobset.sigs.k8s.io/jobset-name") == "tj"
                    and x["status"].get("phase") == "Running"
                ]
            )
            == 2
            and p
        )
    )
    assert pods[0]["spec"]["nodeSelector"] == {"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB"}
    trainjob = json.loads(kubectl("get", "trainjob", "tj", "-n", vision, "-o", "json"))
    (patch,) = [
        p for p in trainjob["spec"]["runtimePatches"] if p["manager"] == "kueue.x-k8s.io/manager"
    ]
    assert patch["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"][0]["name"] == "node"
    # When robotics reclaims its 4 GPUs
    submit(kubectl, robotics, "mine", 4, "kq-low")
    # Then the TrainJob is evicted (suspended: its pods go), requeued, and waits
    assert until(
        lambda: condition(workload(kubectl, vision, "tj"), "Requeued").get("status") == "True", 30
    )
    trainjob = json.loads(kubectl("get", "trainjob", "tj", "-n", vision, "-o", "json"))
    assert trainjob["spec"]["suspend"] is True
    assert condition(trainjob, "Suspended")["reason"] == "Suspended"
    assert condition(workload(kubectl, vision, "tj"), "Preempted")["reason"] == (
        "InCohortReclamation"
    )
    assert until(
        lambda: condition(workload(kubectl, robotics, "mine"), "Admitted").get("status") == "True"
    )
