from cluster.priority_classes import (
    PRIORITY_CLASS_VALUES,
    may_preempt_own_team,
    priority_class_name_of_value,
)


def test_a_priority_value_is_named_by_its_class() -> None:
    assert priority_class_name_of_value(PRIORITY_CLASS_VALUES["high"]) == "gpu-high"
    assert priority_class_name_of_value(12345) == "12345"


def test_only_gpu_low_waits_instead_of_preempting_its_own_team() -> None:
    assert not may_preempt_own_team(PRIORITY_CLASS_VALUES["low"])
    assert all(may_preempt_own_team(PRIORITY_CLASS_VALUES[p]) for p in ("normal", "high"))
