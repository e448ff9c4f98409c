"""The cluster page's GPUs by product say what the machines hold and how it is offered: a
time-sliced node's GPUs are its physical GPUs, shared as replicas, not "0 GPUs"."""

from __future__ import annotations

from cluster.nodes import GpuNode, ResourceUse
from monitoring import charts
from monitoring.selectors.cluster import capacity_by_product


def gpu_node(
    name: str,
    product: str,
    physical: int,
    *,
    whole: int = 0,
    whole_used: int = 0,
    mig: list[ResourceUse] | None = None,
    shared: ResourceUse | None = None,
) -> GpuNode:
    return GpuNode(
        name=name,
        gpu_product=product,
        gpus_allocatable=whole,
        gpus_allocated=whole_used,
        physical_gpus=physical,
        mig=mig or [],
        shared=shared,
        taints=[],
        unschedulable=False,
    )


def test_time_sliced_and_mig_nodes_show_their_gpus_and_how_they_are_offered() -> None:
    # Given A100 nodes with whole GPUs, an A100 node cut into MIG slices, and two T4 nodes
    # of 1 GPU each time-sliced into 16 replicas (GFD calls them Tesla-T4-SHARED)
    nodes = [
        gpu_node("a1", "NVIDIA-A100-SXM4-80GB", 8, whole=8, whole_used=3),
        gpu_node(
            "a2",
            "NVIDIA-A100-SXM4-80GB",
            8,
            mig=[ResourceUse("nvidia.com/mig-1g.10gb", 56, 2)],
        ),
        gpu_node("t1", "Tesla-T4-SHARED", 1, shared=ResourceUse("nvidia.com/gpu.shared", 16, 2)),
        gpu_node("t2", "Tesla-T4-SHARED", 1, shared=ResourceUse("nvidia.com/gpu.shared", 16, 0)),
    ]

    # When the cluster's capacity is summed by product
    rows = {row.product: row for row in capacity_by_product(nodes)}

    # Then the time-sliced T4s read as 2 physical GPUs shared as 32 replicas, 2 in use
    t4 = rows["Tesla-T4 (time-sliced)"]
    assert (t4.nodes, t4.physical_gpus, t4.gpus_total) == (2, 2, 0)
    assert (t4.shared_allocated, t4.shared_total) == (2, 32)
    # and the A100s as 16 GPUs, 8 offered whole (3 in use) and 8 as MIG slices
    a100 = rows["NVIDIA-A100-SXM4-80GB"]
    assert (a100.physical_gpus, a100.gpus_total, a100.gpus_allocated) == (16, 8, 3)
    assert (a100.mig_allocated, a100.mig_total) == (2, 56)

    # And the whole-GPU chart has no empty bar for the time-sliced product
    figure = charts.capacity(list(rows.values()))
    assert all("Tesla-T4" not in name for trace in figure["data"] for name in trace["x"])
