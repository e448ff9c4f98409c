"""The GPU Operator's formats as the portal and the sandbox read them
(scheduling/gpu_operator_config.py): MIG geometry per product, mig-parted's config, the
device plugin's config."""

from __future__ import annotations

import pytest

from scheduling.gpu_operator_config import (
    ConfigError,
    TimeSlicing,
    device_plugin_config_text,
    gpu_layouts,
    layout_problem,
    layout_resources,
    mig_problem,
    parse_device_plugin_config,
    parse_mig_parted_config,
)

A100_80 = "NVIDIA-A100-SXM4-80GB"
CONFIG = """
version: v1
mig-configs:
  all-disabled:
    - devices: all
      mig-enabled: false
  all-1g.10gb:
    - device-filter: ["0x20B210DE", "0x233010DE"]
      devices: all
      mig-enabled: true
      mig-devices: {"1g.10gb": 7}
  all-1g.5gb:
    - device-filter: "0x20B010DE"
      devices: all
      mig-enabled: true
      mig-devices: {"1g.5gb": 7}
  half:
    - devices: [0, 1]
      mig-enabled: true
      mig-devices: {"3g.40gb": 2}
"""


def test_a_gpu_takes_a_layout_only_within_its_profiles_counts_and_slices() -> None:
    assert mig_problem(A100_80, {"1g.10gb": 7}) is None
    assert mig_problem(A100_80, {"3g.40gb": 1, "2g.20gb": 1, "1g.10gb": 2}) is None
    assert mig_problem(A100_80, {"1g.5gb": 1}) == (
        "NVIDIA-A100-SXM4-80GB has no MIG profile 1g.5gb (it offers 1g.10gb, 1g.20gb, "
        "2g.20gb, 3g.40gb, 4g.40gb, 7g.80gb)"
    )
    assert mig_problem(A100_80, {"1g.10gb": 8}) == (
        "one NVIDIA-A100-SXM4-80GB holds at most 7 × 1g.10gb, not 8"
    )
    # 4g + 3g fit the compute slices (7) and the memory slices (8); 4g + 4g do not
    assert mig_problem(A100_80, {"4g.40gb": 1, "3g.40gb": 1}) is None
    assert mig_problem(A100_80, {"3g.40gb": 2, "1g.10gb": 1}) == (
        "1 × 1g.10gb + 2 × 3g.40gb needs 7 compute and 9 memory slices; one "
        "NVIDIA-A100-SXM4-80GB has 7 and 8"
    )
    assert mig_problem("Tesla-T4-SHARED", {"1g.10gb": 1}) == "Tesla-T4 has no MIG"


def test_mig_parted_layouts_apply_by_device_filter_and_index() -> None:
    configs = parse_mig_parted_config(CONFIG)
    # the 80 GB filter matches an 80 GB A100: every GPU becomes 7 slices
    assert gpu_layouts(configs["all-1g.10gb"], A100_80, 2) == {
        0: {"1g.10gb": 7},
        1: {"1g.10gb": 7},
    }
    assert layout_problem("all-1g.10gb", configs["all-1g.10gb"], A100_80, 8) is None
    # the 40 GB layout has no entry for it
    assert layout_problem("all-1g.5gb", configs["all-1g.5gb"], A100_80, 8) == (
        "layout all-1g.5gb has no entry for NVIDIA-A100-SXM4-80GB"
    )
    # an index list leaves the other GPUs as they are (absent from the result)
    assert gpu_layouts(configs["half"], A100_80, 4) == {
        0: {"3g.40gb": 2},
        1: {"3g.40gb": 2},
    }
    assert gpu_layouts(configs["all-disabled"], A100_80, 2) == {0: None, 1: None}


def test_what_a_layout_offers_follows_the_device_plugins_time_slicing() -> None:
    layouts = {0: {"1g.10gb": 7}, 1: None, 2: None}
    assert layout_resources(layouts) == {"nvidia.com/mig-1g.10gb": 7, "nvidia.com/gpu": 2}
    shared = TimeSlicing({"nvidia.com/gpu": 4}, rename_by_default=True)
    assert layout_resources(layouts, shared) == {
        "nvidia.com/mig-1g.10gb": 7,
        "nvidia.com/gpu.shared": 8,
    }
    plain = TimeSlicing({"nvidia.com/gpu": 4}, rename_by_default=False)
    assert layout_resources({0: None}, plain) == {"nvidia.com/gpu": 4}


def test_the_device_plugin_config_round_trips_and_refuses_what_the_plugin_refuses() -> None:
    sharing = TimeSlicing({"nvidia.com/gpu": 8}, rename_by_default=True)
    assert parse_device_plugin_config(device_plugin_config_text(sharing)) == sharing
    assert parse_device_plugin_config("version: v1\n") == TimeSlicing({})
    with pytest.raises(ConfigError, match="replicas must be 2 or more"):
        parse_device_plugin_config(
            "version: v1\nsharing:\n  timeSlicing:\n    resources:\n"
            "    - {name: nvidia.com/gpu, replicas: 1}\n"
        )
    with pytest.raises(ConfigError, match="starts with version: v1"):
        parse_device_plugin_config("sharing: {}\n")
    with pytest.raises(ConfigError, match="mig-devices must be empty"):
        parse_mig_parted_config(
            "version: v1\nmig-configs:\n  x:\n  - devices: all\n    mig-enabled: false\n"
            "    mig-devices: {1g.10gb: 1}\n"
        )
