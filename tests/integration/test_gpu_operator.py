"""MIG layouts changed from the portal against the sandbox's GPU Operator (its MIG manager
follows nvidia.com/mig.config), with a real worker driving the change (docs/gpu-operator.md).

- a node re-partitioned from whole GPUs to all-1g.10gb: the preview's capacity, its job moved
  (re-queued, told why) and running again elsewhere, the label, state followed to success,
  allocatable and the API updated, the node schedulable again, the audit row;
- a layout the product cannot take, a node that is not MIG-capable and a second change on
  one node are refused, naming why;
- the MIG manager failing (a process on the host holds a GPU) leaves the node uncordoned,
  its old layout in place, and the MIG manager's reason on the change;
- only platform admins reach the operator's API; a team lead gets 404.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pytest
from django.contrib.auth.models import User
from playwright.sync_api import expect

from cluster import kube
from cluster.models import GpuChange
from core.errors import ApplicationError, Conflict
from gpu_stack.selectors.changes import mig_preview
from gpu_stack.services import gpu_change_start, plugin_config_save
from jobs.models import Job, JobState
from jobs.services.submit import job_submit
from teams.models import AuditLog
from tests.browser import chromium
from tests.conftest import api_client_for, training_spec
from tests.integration.test_e2e_browser import shot
from tests.sandbox_process import SandboxProcess, inject
from tests.worker_process import wait_for

pytestmark = pytest.mark.django_db(transaction=True)
# It re-partitions the nodes' GPUs: a cluster of its own.
OWN_CLUSTER = True

A100 = "NVIDIA-A100-SXM4-80GB"


@pytest.fixture(autouse=True)
def whole_gpus(cluster: SandboxProcess) -> Iterator[None]:
    """Tests share one sandbox: its A100 nodes go back to whole GPUs, schedulable."""
    yield
    for node in ("gpu-a100-0", "gpu-a100-1"):
        kube.cordon(node, unschedulable=False)
        kube.label_node(node, {"nvidia.com/mig.config": "all-disabled"})
    wait_for(
        lambda: all(
            kube.get("Node", n)["status"]["allocatable"].get("nvidia.com/gpu") == "8"
            for n in ("gpu-a100-0", "gpu-a100-1")
        ),
        timeout=30,
    )


def running(job: Job, timeout: float = 60) -> Job:
    return wait_for(
        lambda: (
            (j := Job.objects.get(pk=job.pk)).state == JobState.RUNNING
            and j.placement.get("pods")
            and j
        ),
        timeout=timeout,
    )


def eight_gpu_job(user: User) -> Job:
    """A job that fills one whole-A100 node."""
    return job_submit(
        user=user,
        data=training_spec(
            name="big", gpu={"count": 8, "product": A100}, env={"SANDBOX_DURATION": "1h"}
        ),
    )


def node_of(job: Job) -> str:
    pods = list(kube.list_all("Pod", label_selector=f"gpu-portal.dev/job-id={job.pk}"))
    nodes = {p["spec"].get("nodeName") for p in pods if not p["metadata"].get("deletionTimestamp")}
    assert len(nodes) == 1, nodes
    return str(nodes.pop())


def finished(change: GpuChange, timeout: float = 90) -> GpuChange:
    return wait_for(
        lambda: not (c := GpuChange.objects.get(pk=change.pk)).active and c, timeout=timeout
    )


def test_a_node_is_repartitioned_and_its_job_runs_again_elsewhere(
    users: dict[str, User],
) -> None:
    # Given alice's 8-GPU job running on one of the two whole-A100 nodes
    job = eight_gpu_job(users["alice"])
    node = node_of(running(job))
    other = ({"gpu-a100-0", "gpu-a100-1"} - {node}).pop()
    # When the admin previews all-1g.10gb for that node
    preview = mig_preview(node=node, layout="all-1g.10gb")
    # Then: 8 whole GPUs lost, 56 slices gained, alice's job the one to move
    assert preview.problem == ""
    assert {(c.resource, c.before, c.after) for c in preview.capacity} == {
        ("nvidia.com/gpu", 8, 0),
        ("nvidia.com/mig-1g.10gb", 0, 56),
    }
    assert [(j.id, j.owner, j.gpus) for j in preview.jobs] == [
        (job.pk, "alice", {"nvidia.com/gpu": 8})
    ]
    # When they apply it, moving the jobs away
    change = gpu_change_start(
        actor=users["admin"], node=node, layout="all-1g.10gb", displace="evict"
    )
    done = finished(change)
    # Then the MIG manager re-partitioned it and the node is schedulable again
    assert done.phase == GpuChange.Phase.SUCCEEDED, done.message
    assert done.displaced == [job.pk]
    obj = kube.get("Node", node)
    labels = obj["metadata"]["labels"]
    assert labels["nvidia.com/mig.config"] == "all-1g.10gb"
    assert labels["nvidia.com/mig.config.state"] == "success"
    assert labels["nvidia.com/mig-1g.10gb.count"] == "56"
    gpu_allocatable = {
        r: q for r, q in obj["status"]["allocatable"].items() if r.startswith("nvidia.com/")
    }
    assert gpu_allocatable == {"nvidia.com/mig-1g.10gb": "56"}
    assert not obj["spec"].get("unschedulable")
    # ...alice's job was told why, re-queued, and runs again on the other node
    moved = Job.objects.get(pk=job.pk)
    entry = moved.events.get(reason="NodeReshape")
    assert (
        f"Moved off node {node}: admin is re-partitioning its GPUs as all-1g.10gb" in entry.message
    )
    assert node_of(running(job)) == other
    # ...the cluster API shows the new shape
    rows = api_client_for(users["alice"]).get("/api/v1/cluster/nodes/").json()
    row = next(r for r in rows if r["name"] == node)
    assert row["mig_config"] == "all-1g.10gb" and row["mig_config_state"] == "success"
    assert [(r["resource"], r["allocatable"]) for r in row["gpu_resources"]] == [
        ("nvidia.com/mig-1g.10gb", 56)
    ]
    # ...and the audit log says who changed what
    audit = AuditLog.objects.get(action="gpu.mig_layout")
    assert audit.actor == users["admin"]
    assert audit.changes["nvidia.com/mig.config"] == ["all-disabled", "all-1g.10gb"]


def test_layouts_a_node_cannot_take_and_a_second_change_are_refused(
    users: dict[str, User],
) -> None:
    admin = users["admin"]
    # A layout of the 40 GB A100s on an 80 GB one, named with the profile it lacks
    with pytest.raises(ApplicationError) as refused:
        gpu_change_start(actor=admin, node="gpu-a100-0", layout="all-1g.5gb", displace="evict")
    assert "layout all-1g.5gb has no entry for NVIDIA-A100-SXM4-80GB" in refused.value.message
    # A layout the config does not have, and a node without MIG
    with pytest.raises(ApplicationError, match="no such layout"):
        gpu_change_start(actor=admin, node="gpu-a100-0", layout="all-9g.99gb", displace="evict")
    with pytest.raises(ApplicationError, match=r"gpu-t4-shared-0 .* is not MIG-capable"):
        gpu_change_start(actor=admin, node="gpu-t4-shared-0", layout="all-1g.10gb", displace="wait")
    assert not GpuChange.objects.exists()
    # Given a change that waits for a running job to finish
    job = job_submit(
        user=users["alice"],
        data=training_spec(gpu={"count": 8, "product": A100}, env={"SANDBOX_DURATION": "1h"}),
    )
    node = node_of(running(job))
    first = gpu_change_start(actor=admin, node=node, layout="all-balanced", displace="wait")
    wait_for(lambda: kube.get("Node", node)["spec"].get("unschedulable"), timeout=20)
    # When another change of the same node is asked for, it is refused, naming the first
    with pytest.raises(Conflict, match=f"node {node} already has a change under way"):
        gpu_change_start(actor=admin, node=node, layout="all-3g.40gb", displace="evict")
    # ...and the first keeps waiting for the job, its label untouched
    assert GpuChange.objects.get(pk=first.pk).phase == GpuChange.Phase.DRAINING
    assert "waiting for: job" in GpuChange.objects.get(pk=first.pk).message
    assert kube.get("Node", node)["metadata"]["labels"]["nvidia.com/mig.config"] == "all-disabled"


def test_a_failing_mig_manager_leaves_the_node_uncordoned_with_its_reason(
    users: dict[str, User], sandbox: SandboxProcess
) -> None:
    # Given a process on the host (Xorg) holding GPU 3 of gpu-a100-1
    inject(sandbox, node="gpu-a100-1", gpu=3, host_client="Xorg")
    # When the admin re-partitions the node
    change = gpu_change_start(
        actor=users["admin"], node="gpu-a100-1", layout="all-3g.40gb", displace="evict"
    )
    done = finished(change)
    # Then the change failed with the MIG manager's own reason
    assert done.phase == GpuChange.Phase.FAILED
    assert "GPU 3 is in use by another client (process Xorg)" in done.message
    # ...and the node is schedulable, with its whole GPUs as before
    obj = kube.get("Node", "gpu-a100-1")
    assert not obj["spec"].get("unschedulable")
    assert obj["metadata"]["labels"]["nvidia.com/mig.config.state"] == "failed"
    assert obj["status"]["allocatable"]["nvidia.com/gpu"] == "8"
    inject(sandbox, node="gpu-a100-1", gpu=3, host_client="")


def test_only_platform_admins_reach_the_operator_api(
    users: dict[str, User],
) -> None:
    bob, admin = api_client_for(users["bob"]), api_client_for(users["admin"])  # bob: a lead
    for path in (
        "/api/v1/cluster/gpu-operator/",
        "/api/v1/cluster/gpu-changes/",
        "/api/v1/cluster/nodes/gpu-a100-0/mig-layout/?layout=all-1g.10gb",
    ):
        assert bob.get(path).status_code == 404, path
        assert admin.get(path).status_code == 200, path
    refused = bob.post(
        "/api/v1/cluster/nodes/gpu-a100-0/mig-layout/", {"layout": "all-1g.10gb"}, format="json"
    )
    assert refused.status_code == 404
    assert not GpuChange.objects.exists()
    # The admin's view of the operator: the ClusterPolicy ready, the layouts it offers
    operator = admin.get("/api/v1/cluster/gpu-operator/").json()
    assert operator["cluster_policy"]["state"] == "ready"
    assert {"all-disabled", "all-1g.10gb", "all-balanced"} <= {
        layout["name"] for layout in operator["mig_layouts"]
    }
    # ...and everyone's view of a node: the operator's labels and operands
    rows = api_client_for(users["alice"]).get("/api/v1/cluster/nodes/").json()
    t4 = next(r for r in rows if r["name"] == "gpu-t4-shared-0")
    assert t4["device_plugin_config"] == "gpu-t4-shared"
    assert t4["time_slicing"] == {"replicas": {"nvidia.com/gpu": 4}, "rename_by_default": True}
    assert t4["driver_ready"] and t4["device_plugin_ready"] and not t4["mig_capable"]


def test_an_admin_repartitions_a_node_in_the_browser(
    users: dict[str, User], live_server: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given alice's 8-GPU job on a whole-A100 node
    job = eight_gpu_job(users["alice"])
    node = node_of(running(job))
    with chromium(monkeypatch) as browser:
        page = browser.new_context(viewport={"width": 1500, "height": 1000}).new_page()
        page.goto(f"{live_server.url}/login/")
        page.fill("#id_username", "admin")
        page.fill("#id_password", "demo")
        page.click("button[type=submit]")
        # The admin's GPU stack page: the operator ready, the node with whole GPUs
        page.goto(f"{live_server.url}/gpu-stack/")
        expect(page.get_by_test_id("policy-state")).to_have_text("ready")
        row = page.locator(f"tr[data-node={node}]")
        expect(row.get_by_test_id("mig-config")).to_have_text("all-disabled")
        # When they pick the node and all-1g.10gb and preview
        row.locator("input[name=nodes]").check()
        page.select_option("#layout", "all-1g.10gb")
        page.get_by_test_id("preview").click()
        # Then the preview says what the node gains and loses, and which job moves
        preview = page.locator(f"[data-preview={node}]")
        expect(
            preview.locator("tr[data-resource='nvidia.com/gpu'] [data-testid=delta]")
        ).to_have_text("−8")
        expect(
            preview.locator("tr[data-resource='nvidia.com/mig-1g.10gb'] [data-testid=delta]")
        ).to_have_text("+56")
        expect(preview.get_by_test_id("moved-jobs")).to_contain_text(f"vision/big #{job.pk}")
        shot(page, "31-mig-preview")
        # When they confirm
        page.get_by_test_id("apply").click()
        expect(page).to_have_url(re.compile(r"/gpu-stack/$"))
        # Then the page follows the change to success and shows the new slices
        change = page.locator("[data-testid=gpu-changes] tbody tr").first
        expect(change.get_by_test_id("change-state")).to_have_text("succeeded", timeout=90_000)
        expect(row.get_by_test_id("mig-config")).to_have_text("all-1g.10gb", timeout=10_000)
        expect(row.get_by_test_id("offers")).to_contain_text("nvidia.com/mig-1g.10gb 0 / 56")
        shot(page, "32-mig-changed")
    # ...alice's job runs again on the other node
    assert node_of(running(job)) != node


def test_a_team_lead_gets_404_for_the_gpu_stack_page(users: dict[str, User], client: Any) -> None:
    client.force_login(users["bob"])
    assert client.get("/gpu-stack/").status_code == 404
    assert client.get("/gpu-stack/mig/?nodes=gpu-a100-0&layout=all-1g.10gb").status_code == 404
    response = client.post("/gpu-stack/mig/", {"nodes": "gpu-a100-0", "layout": "all-1g.10gb"})
    assert response.status_code == 404
    assert not GpuChange.objects.exists()
    client.force_login(users["admin"])
    assert client.get("/gpu-stack/").status_code == 200


def shared_pod(name: str) -> dict[str, Any]:
    """A pod someone ran by hand on a time-sliced T4 (not the portal's: no job label)."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "restartPolicy": "Always",
            "nodeSelector": {"nvidia.com/gpu.product": "Tesla-T4"},
            "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists"}],
            "containers": [
                {
                    "name": "main",
                    "image": "nvcr.io/nvidia/pytorch:24.05-py3",
                    "resources": {"limits": {"nvidia.com/gpu.shared": "1"}},
                }
            ],
        },
    }


def t4_allocatable() -> str:
    return str(
        kube.get("Node", "gpu-t4-shared-0")["status"]["allocatable"]["nvidia.com/gpu.shared"]
    )


def test_time_slicing_is_changed_only_when_no_pod_would_be_stranded(
    users: dict[str, User],
) -> None:
    admin = users["admin"]
    names = [f"by-hand-{i}" for i in range(5)]
    try:
        # Given five pods on the T4 node's two GPUs (4 replicas each): three share a GPU
        for name in names:
            kube.create(shared_pod(name))
        wait_for(
            lambda: all(
                (kube.get("Pod", n, "default").get("status") or {}).get("phase") == "Running"
                for n in names
            ),
            timeout=30,
        )
        # When the admin lowers its config to 2 replicas, it is refused, naming the pods
        with pytest.raises(ApplicationError) as refused:
            plugin_config_save(
                actor=admin, name="gpu-t4-shared", replicas=2, rename_by_default=True
            )
        assert (
            "node gpu-t4-shared-0: 5 running pods hold its 2 GPUs (up to 3 on a GPU); "
            "gpu-t4-shared offers 2 per GPU" in refused.value.message
        )
        assert "default/by-hand-0" in refused.value.message
        assert t4_allocatable() == "8" and not GpuChange.objects.exists()
        # When they raise it to 8 replicas instead
        (change,) = plugin_config_save(
            actor=admin, name="gpu-t4-shared", replicas=8, rename_by_default=True
        )
        # Then the device plugin restarts with it: 16 shared GPUs, the pods still running
        done = finished(change)
        assert done.phase == GpuChange.Phase.SUCCEEDED, done.message
        assert t4_allocatable() == "16"
        labels = kube.get("Node", "gpu-t4-shared-0")["metadata"]["labels"]
        assert labels["nvidia.com/gpu.replicas"] == "8"
        assert all(kube.get("Pod", n, "default")["status"]["phase"] == "Running" for n in names)
        audit = AuditLog.objects.get(action="gpu.device_plugin_config_saved")
        assert audit.changes["replicas"] == 8 and audit.changes["nodes"] == ["gpu-t4-shared-0"]
    finally:
        for name in names:
            kube.delete("Pod", name, "default", grace_period_seconds=0)
        if t4_allocatable() != "8":
            GpuChange.objects.all().delete()
            plugin_config_save(
                actor=admin, name="gpu-t4-shared", replicas=4, rename_by_default=True
            )
            wait_for(lambda: t4_allocatable() == "8", timeout=30)


def test_a_node_whose_operands_stop_makes_the_cluster_policy_not_ready(
    users: dict[str, User], sandbox: SandboxProcess
) -> None:
    admin = api_client_for(users["admin"])
    try:
        # Given the T4 node's kubelet gone (its operand pods stop being Ready)
        inject(sandbox, node="gpu-t4-shared-0", down=True)
        # Then the operator reports which of its states are not ready
        policy = wait_for(
            lambda: (
                (p := admin.get("/api/v1/cluster/gpu-operator/").json()["cluster_policy"])["state"]
                == "notReady"
                and p
            ),
            timeout=30,
        )
        assert policy["message"].startswith(
            "ClusterPolicy is not ready; states not ready: [state-driver"
        )
        # ...and the node's driver and device plugin are not ready (their pods turn unready
        # one after the other: both, within the wait)
        row = wait_for(
            lambda: next(
                (
                    r
                    for r in admin.get("/api/v1/cluster/nodes/").json()
                    if r["name"] == "gpu-t4-shared-0"
                    and not r["driver_ready"]
                    and not r["device_plugin_ready"]
                ),
                None,
            ),
            timeout=30,
        )
        assert row["name"] == "gpu-t4-shared-0"
    finally:
        inject(sandbox, node="gpu-t4-shared-0", down=False)
    wait_for(
        lambda: (
            admin.get("/api/v1/cluster/gpu-operator/").json()["cluster_policy"]["state"] == "ready"
        ),
        timeout=60,
    )
