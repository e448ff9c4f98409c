"""JobSet on the sandbox, as a cluster with the JobSet controller runs it, driven with a real
kubectl: the webhook's defaults, the child Jobs with JobSet's names and labels, the headless
Service, pods that find each other by hostname, completion, restarts up to maxRestarts, and
suspend reaching the child Jobs."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

from tests.sandbox.conftest import rows

JOBSET = """
apiVersion: jobset.x-k8s.io/v1alpha2
kind: JobSet
metadata: {{name: {name}}}
spec:
  suspend: {suspend}
  {failure}
  replicatedJobs:
  - name: leader
    replicas: 1
    template:
      spec:
        parallelism: 1
        completions: 1
        backoffLimit: 0
        template:
          metadata:
            annotations:
              sandbox.gpu-portal.dev/duration: "{duration}"
              sandbox.gpu-portal.dev/exit-code: "{exit_code}"
          spec:
            containers: [{{name: main, image: busybox, resources: {{requests: {{cpu: 100m}}}}}}]
  - name: workers
    replicas: 2
    template:
      spec:
        parallelism: 2
        completions: 2
        backoffLimit: 0
        template:
          metadata:
            annotations: {{sandbox.gpu-portal.dev/duration: "{duration}"}}
          spec:
            containers: [{{name: main, image: busybox, resources: {{requests: {{cpu: 100m}}}}}}]
"""


def until(check: Callable[[], Any], timeout: float = 20.0) -> Any:
    """``check()`` once truthy; its last value after ``timeout`` (the caller asserts it)."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value or time.monotonic() > deadline:
            return value
        time.sleep(0.2)


def jobset(kubectl, ns: str, name: str) -> dict[str, Any]:  # type: ignore[no-untyped-def]
    return dict(json.loads(kubectl("get", "jobset", name, "-n", ns, "-o", "json")))


def condition(obj: dict[str, Any], kind: str) -> dict[str, Any]:
    return next(
        (c for c in (obj.get("status") or {}).get("conditions") or [] if c["type"] == kind), {}
    )


def apply(
    kubectl,
    ns: str,
    name: str,
    *,
    suspend: bool = False,
    duration: str = "30s",
    exit_code: int = 0,
    failure: str = "",
) -> None:  # type: ignore[no-untyped-def]
    manifest = JOBSET.format(
        name=name,
        suspend=str(suspend).lower(),
        duration=duration,
        exit_code=exit_code,
        failure=failure,
    )
    kubectl("apply", "-n", ns, "-f", "-", stdin=manifest)


def test_a_jobset_runs_its_replicated_jobs_and_completes(kubectl, namespace) -> None:  # type: ignore[no-untyped-def]
    apply(kubectl, namespace, "train")
    # The webhook's defaults
    spec = jobset(kubectl, namespace, "train")["spec"]
    assert spec["successPolicy"] == {"operator": "All"}
    assert spec["network"] == {"enableDNSHostnames": True, "publishNotReadyAddresses": True}
    assert spec["replicatedJobs"][0]["template"]["spec"]["completionMode"] == "Indexed"
    assert (
        spec["replicatedJobs"][1]["template"]["spec"]["template"]["spec"]["restartPolicy"]
        == "OnFailure"
    )
    # One child Job per replica, JobSet's names and labels, a headless Service named after it
    jobs = until(
        lambda: len(names := rows(kubectl("get", "jobs", "-n", namespace))[1:]) == 3 and names
    )
    assert sorted(r[0] for r in jobs) == ["train-leader-0", "train-workers-0", "train-workers-1"]
    worker = json.loads(kubectl("get", "job", "train-workers-1", "-n", namespace, "-o", "json"))
    labels = worker["metadata"]["labels"]
    assert labels["jobset.sigs.k8s.io/jobset-name"] == "train"
    assert labels["jobset.sigs.k8s.io/replicatedjob-name"] == "workers"
    assert (
        labels["jobset.sigs.k8s.io/job-index"],
        labels["jobset.sigs.k8s.io/job-global-index"],
    ) == ("1", "2")
    assert labels["jobset.sigs.k8s.io/restart-attempt"] == "0"
    service = json.loads(kubectl("get", "service", "train", "-n", namespace, "-o", "json"))
    assert service["spec"]["clusterIP"] == "None"
    assert service["spec"]["selector"] == {"jobset.sigs.k8s.io/jobset-name": "train"}
    # Pods find each other by hostname under the JobSet's subdomain
    pods = until(
        lambda: (
            len(
                p := json.loads(
                    kubectl(
                        "get",
                        "pods",
                        "-n",
                        namespace,
                        "-l",
                        "jobset.sigs.k8s.io/jobset-name=train",
                        "-o",
                        "json",
                    )
                )["items"]
            )
            == 5
            and p
        )
    )
    hosts = sorted(f"{p['spec']['hostname']}.{p['spec']['subdomain']}" for p in pods)
    assert hosts[0] == "train-leader-0-0.train" and "train-workers-1-1.train" in hosts
    # And it completes once every Job has
    done = until(
        lambda: condition(jobset(kubectl, namespace, "train"), "Completed").get("status") == "True",
        30,
    )
    assert done
    final = jobset(kubectl, namespace, "train")
    assert condition(final, "Completed")["reason"] == "AllJobsCompleted"
    assert final["status"]["terminalState"] == "Completed"
    table = rows(kubectl("get", "jobsets", "-n", namespace))
    assert table[0] == ["NAME", "TERMINALSTATE", "RESTARTS", "COMPLETED", "SUSPENDED", "AGE"]
    assert table[1][:4] == ["train", "Completed", "0", "True"]


def test_a_failed_job_restarts_the_jobset_until_max_restarts(kubectl, namespace) -> None:  # type: ignore[no-untyped-def]
    apply(
        kubectl,
        namespace,
        "flaky",
        duration="5s",
        exit_code=1,
        failure="failurePolicy: {maxRestarts: 1}",
    )
    # The leader fails: the JobSet restarts once, then fails for good
    failed = until(
        lambda: condition(jobset(kubectl, namespace, "flaky"), "Failed").get("status") == "True", 40
    )
    assert failed
    final = jobset(kubectl, namespace, "flaky")
    assert final["status"]["restarts"] == 1 and final["status"]["terminalState"] == "Failed"
    assert condition(final, "Failed")["reason"] == "ReachedMaxRestarts"
    assert condition(final, "Failed")["message"].startswith(
        "jobset failed due to reaching max number of restarts (first failed job: flaky-leader-0)"
    )
    events = kubectl(
        "get", "events", "-n", namespace, "--field-selector", "involvedObject.name=flaky"
    )
    assert "RestartJobSetFailurePolicyAction" in events


def test_suspend_reaches_the_child_jobs_both_ways(kubectl, namespace) -> None:  # type: ignore[no-untyped-def]
    apply(kubectl, namespace, "held", suspend=True, duration="300s")
    jobs = until(lambda: len(rows(kubectl("get", "jobs", "-n", namespace))[1:]) == 3)
    assert jobs
    suspended = [
        json.loads(kubectl("get", "job", f"held-{n}", "-n", namespace, "-o", "json"))["spec"][
            "suspend"
        ]
        for n in ("leader-0", "workers-0")
    ]
    assert suspended == [True, True]
    assert until(
        lambda: (
            condition(jobset(kubectl, namespace, "held"), "Suspended").get("reason")
            == "SuspendedJobs"
        )
    )
    kubectl(
        "patch",
        "jobset",
        "held",
        "-n",
        namespace,
        "--type=merge",
        "-p",
        '{"spec": {"suspend": false}}',
    )
    resumed = until(
        lambda: (
            json.loads(kubectl("get", "job", "held-leader-0", "-n", namespace, "-o", "json"))[
                "spec"
            ]["suspend"]
            is False
        )
    )
    assert resumed
    assert until(
        lambda: (
            condition(jobset(kubectl, namespace, "held"), "Suspended").get("reason") == "ResumeJobs"
        )
    )
