"""Kueue's API on the sandbox, as a platform engineer meets it with a real kubectl on a
cluster that has Kueue installed: its CRDs, its kinds in discovery with their short names,
``kubectl explain``, printer columns, defaults and validation of objects written by hand."""

from __future__ import annotations

import json

import pytest

from tests.sandbox.conftest import rows

KUEUE_KINDS = {
    "clusterqueues": ("cq", "false", "ClusterQueue"),
    "cohorts": ("co", "false", "Cohort"),
    "localqueues": ("queue,queues,lq", "true", "LocalQueue"),
    "resourceflavors": ("flavor,flavors,rf", "false", "ResourceFlavor"),
    "workloadpriorityclasses": ("wpc", "false", "WorkloadPriorityClass"),
    "workloads": ("kwl,kueueworkload,kueueworkloads", "true", "Workload"),
}

QUEUES = """
apiVersion: kueue.x-k8s.io/v1beta2
kind: ResourceFlavor
metadata:
  name: a100
spec:
  nodeLabels:
    nvidia.com/gpu.product: NVIDIA-A100-SXM4-80GB
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: ClusterQueue
metadata:
  name: hand-written
spec:
  cohortName: research
  namespaceSelector: {}
  resourceGroups:
  - coveredResources: [nvidia.com/gpu]
    flavors:
    - name: a100
      resources:
      - name: nvidia.com/gpu
        nominalQuota: 8
        borrowingLimit: "4"
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: LocalQueue
metadata:
  name: user-queue
spec:
  clusterQueue: hand-written
"""


def test_kueues_kinds_are_served_as_on_a_cluster_with_kueue(kubectl) -> None:  # type: ignore[no-untyped-def]
    # Its CRDs are installed and established
    crds = {r[0] for r in rows(kubectl("get", "crd"))[1:]}
    assert {f"{plural}.kueue.x-k8s.io" for plural in KUEUE_KINDS} <= crds
    # Its kinds are in discovery, with Kueue's short names and scopes
    listed = {r[0]: r for r in rows(kubectl("api-resources", "--api-group=kueue.x-k8s.io"))[1:]}
    for plural, (short, namespaced, kind) in KUEUE_KINDS.items():
        assert listed[plural] == [plural, short, "kueue.x-k8s.io/v1beta2", namespaced, kind]
    # And kubectl explain reads their schemas
    out = kubectl("explain", "clusterqueue.spec.resourceGroups.flavors.resources")
    assert "FIELD: resources <[]Object>" in out and "nominalQuota" in out


def test_queues_written_by_hand_are_defaulted_and_print_kueues_columns(kubectl, namespace) -> None:  # type: ignore[no-untyped-def]
    kubectl("apply", "-n", namespace, "-f", "-", stdin=QUEUES)
    try:
        queue = json.loads(kubectl("get", "clusterqueue", "hand-written", "-o", "json"))
        # Kueue's defaults are written
        spec = queue["spec"]
        assert spec["queueingStrategy"] == "BestEffortFIFO" and spec["stopPolicy"] == "None"
        assert spec["preemption"] == {
            "reclaimWithinCohort": "Never",
            "withinClusterQueue": "Never",
            "borrowWithinCohort": {"policy": "Never"},
        }
        assert spec["flavorFungibility"] == {
            "whenCanBorrow": "MayStopSearch",
            "whenCanPreempt": "TryNextFlavor",
        }
        # The tables show Kueue's columns (the priority-1 ones with -o wide)
        assert rows(kubectl("get", "cq"))[0] == ["NAME", "COHORT", "PENDING WORKLOADS"]
        wide = rows(kubectl("get", "cq", "hand-written", "-o", "wide"))
        assert wide[0] == ["NAME", "COHORT", "STRATEGY", "PENDING WORKLOADS", "ADMITTED WORKLOADS"]
        assert wide[1][:3] == ["hand-written", "research", "BestEffortFIFO"]
        local = rows(kubectl("get", "localqueues", "-n", namespace))
        assert local[0] == ["NAME", "CLUSTERQUEUE", "PENDING WORKLOADS", "ADMITTED WORKLOADS"]
        assert local[1][:2] == ["user-queue", "hand-written"]
    finally:
        kubectl("delete", "-n", namespace, "-f", "-", "--ignore-not-found", stdin=QUEUES)


@pytest.mark.parametrize(
    ("change", "words"),
    [
        (
            "  cohortName: research\n  queueingStrategy: FIFO\n",
            'spec.queueingStrategy: Unsupported value: "FIFO": supported values: '
            '"StrictFIFO", "BestEffortFIFO"',
        ),
        (
            "  cohortName: research\n  preemption: {reclaimWithinCohort: Always}\n",
            'spec.preemption.reclaimWithinCohort: Unsupported value: "Always"',
        ),
        (
            "  cohortName: research\n",
            'spec.resourceGroups[0].flavors[0].name: Invalid value: "A100_GPU"',
        ),
    ],
)
def test_a_clusterqueue_kueue_would_refuse_is_refused_naming_the_field(
    kubectl,  # type: ignore[no-untyped-def]
    namespace,
    change: str,
    words: str,
) -> None:
    bad = QUEUES.split("---")[1].replace("  cohortName: research\n", change)
    if change == "  cohortName: research\n":  # a flavor name that is not a DNS subdomain
        bad = bad.replace("- name: a100", "- name: A100_GPU")
    out = kubectl("apply", "-f", "-", stdin=bad, check=False)
    kubectl("delete", "clusterqueue", "hand-written", "--ignore-not-found")
    assert 'The ClusterQueue "hand-written" is invalid' in out and words in out, out
