"""The portal's four PriorityClasses (docs/references.md): names, values, preemption, the objects.

Jobs name them in ``priorityClassName``, admission orders its queue by their values, the
fit preview and "why pending" schedule with them, and the team sync creates them: one
definition for all.
"""

from __future__ import annotations

from typing import Any, Literal

from cluster.labels import MANAGED_BY_LABEL, MANAGED_BY_VALUE

Priority = Literal["critical", "high", "normal", "low"]
# Highest first.
PRIORITIES: tuple[Priority, ...] = ("critical", "high", "normal", "low")

PRIORITY_CLASS_VALUES: dict[Priority, int] = {
    "critical": 1_000_000,
    "high": 100_000,
    "normal": 10_000,
    "low": 1_000,
}
PRIORITY_CLASS_DESCRIPTIONS: dict[Priority, str] = {
    "critical": "Critical GPU workloads (production inference)",
    "high": "High priority GPU workloads (urgent training)",
    "normal": "Normal priority GPU workloads (standard training)",
    "low": "Low priority GPU workloads (experiments)",
}


def priority_class_name(priority: Priority) -> str:
    return f"gpu-{priority}"


def preemption_policy(priority: Priority) -> str:
    """Low-priority experiments wait for free GPUs instead of evicting someone else's work
    (they can still be preempted themselves); every other class preempts lower ones."""
    return "Never" if priority == "low" else "PreemptLowerPriority"


def priority_class_name_of_value(value: int) -> str:
    """The PriorityClass a job of priority ``value`` runs under (``gpu-high``); the number
    itself for a value no class of the portal has."""
    return next(
        (priority_class_name(p) for p, v in PRIORITY_CLASS_VALUES.items() if v == value),
        str(value),
    )


def may_preempt_own_team(value: int) -> bool:
    """Whether a job of priority ``value`` evicts its own team's lower-priority jobs: only
    above every PriorityClass whose preemptionPolicy is Never (``gpu-low`` waits)."""
    never = [v for p, v in PRIORITY_CLASS_VALUES.items() if preemption_policy(p) == "Never"]
    return all(value > v for v in never)


# PriorityClass name → (value, preemptionPolicy), as the scheduling core takes them.
PRIORITY_CLASSES: dict[str, tuple[int, str]] = {
    priority_class_name(p): (PRIORITY_CLASS_VALUES[p], preemption_policy(p)) for p in PRIORITIES
}


def priority_classes() -> list[dict[str, Any]]:
    """The cluster-scoped PriorityClasses every job's ``priorityClassName`` refers to.

    ``globalDefault`` is false on all four, although a guide it follows marks
    gpu-normal as the default (docs/references.md): a cluster allows only one
    global default (the API server refuses a second one), the cluster may
    already have one, and a global default would also reprioritise every pod
    the portal does not own. The
    portal always sets ``priorityClassName``, so it needs no default.
    """
    return [
        {
            "apiVersion": "scheduling.k8s.io/v1",
            "kind": "PriorityClass",
            "metadata": {
                "name": priority_class_name(priority),
                "labels": {MANAGED_BY_LABEL: MANAGED_BY_VALUE},
            },
            "value": PRIORITY_CLASS_VALUES[priority],
            "globalDefault": False,
            # Low-priority experiments wait for free GPUs instead of evicting
            # someone else's work; they can still be preempted themselves.
            "preemptionPolicy": preemption_policy(priority),
            "description": PRIORITY_CLASS_DESCRIPTIONS[priority],
        }
        for priority in PRIORITIES
    ]


# --- objects -----------------------------------------------------------------
