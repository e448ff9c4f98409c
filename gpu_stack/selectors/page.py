"""The GPU stack page's reads (platform admins): the GPU Operator's state, each GPU node as
it sees it, the MIG layouts the cluster's products can take, and the changes the portal made.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from django.utils import timezone

from cluster.gpu_operator_state import GpuOperator, OperatorNode, gpu_nodes_operator
from cluster.models import GpuChange
from core.errors import ClusterUnavailable
from gpu_stack.selectors.advice import GpuAdvice, gpu_advice
from scheduling.gpu_operator_config import base_product, layout_problem
from scheduling.resources import ANY_GPU, GPU_COUNT_LABEL


@dataclass(frozen=True)
class LayoutChoice:
    name: str
    products: list[str]  # the cluster's MIG-capable products whose GPUs can take it


@dataclass(frozen=True)
class PluginConfigRow:
    name: str
    replicas: int  # of nvidia.com/gpu; 1: no sharing
    rename: bool
    nodes: list[str]
    error: str = ""


@dataclass(frozen=True)
class GpuStack:
    operator: GpuOperator | None = None
    nodes: list[OperatorNode] = field(default_factory=list)
    layouts: list[LayoutChoice] = field(default_factory=list)
    changes: list[GpuChange] = field(default_factory=list)
    cluster_error: str = ""
    plugin_configs: list[PluginConfigRow] = field(default_factory=list)
    advice: list[GpuAdvice] = field(default_factory=list)
    advice_error: str = ""

    @property
    def changing(self) -> bool:
        return any(c.active for c in self.changes)


def gpu_stack_get() -> GpuStack:
    """Everything the page shows; the cluster being unreachable is said, not raised."""
    changes = list(GpuChange.objects.select_related("requested_by")[:15])
    try:
        operator, nodes = gpu_nodes_operator()
    except ClusterUnavailable as exc:
        return GpuStack(changes=changes, cluster_error=exc.message)
    advice, advice_error = gpu_advice(operator=operator, nodes=nodes, now=timezone.now())
    return GpuStack(
        operator,
        nodes,
        _layout_choices(operator, nodes),
        changes,
        plugin_configs=_plugin_rows(operator, nodes),
        advice=advice,
        advice_error=advice_error,
    )


def _plugin_rows(operator: GpuOperator, nodes: list[OperatorNode]) -> list[PluginConfigRow]:
    rows = [
        PluginConfigRow(
            name,
            sharing.replicas.get(ANY_GPU, 1),
            sharing.rename_by_default,
            [n.node.name for n in nodes if n.plugin_config == name],
        )
        for name, sharing in sorted(operator.plugin_configs.items())
    ]
    rows += [
        PluginConfigRow(name, 1, False, [n.node.name for n in nodes if n.plugin_config == name], e)
        for name, e in sorted(operator.plugin_config_errors.items())
    ]
    return rows


def _layout_choices(operator: GpuOperator, nodes: list[OperatorNode]) -> list[LayoutChoice]:
    """Each layout of the MIG manager's config with the products (of the cluster's
    MIG-capable nodes) it suits; layouts that suit none are left out."""
    shapes: dict[str, int] = {}
    for entry in nodes:
        if entry.operator.mig_capable:
            product = base_product(entry.node.gpu_product)
            shapes[product] = max(shapes.get(product, 0), _count(entry))
    choices = []
    for name, entries in operator.mig_layouts.items():
        products = [
            p for p, count in sorted(shapes.items()) if not layout_problem(name, entries, p, count)
        ]
        if products:
            choices.append(LayoutChoice(name, products))
    return choices


def _count(entry: OperatorNode) -> int:
    try:
        return int(entry.node.labels.get(GPU_COUNT_LABEL, "0"))
    except ValueError:
        return 0
