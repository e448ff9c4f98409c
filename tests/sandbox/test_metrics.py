"""The dcgm-exporter endpoint: format, labels, and values that follow the workload."""

from __future__ import annotations

import urllib.request

from conftest import job_manifest, wait_for
from prometheus_client.parser import text_string_to_metric_families

A100 = "NVIDIA-A100-SXM4-80GB"


def _scrape(sandbox) -> dict[str, list]:
    with urllib.request.urlopen(sandbox.metrics_url, timeout=10) as resp:
        text = resp.read().decode()
    assert "# HELP DCGM_FI_DEV_GPU_UTIL GPU utilization (in %)." in text
    assert "# TYPE DCGM_FI_DEV_GPU_UTIL gauge" in text
    return {f.name: f.samples for f in text_string_to_metric_families(text)}


def _pod_samples(families, metric, namespace, pod_prefix):
    return [
        s
        for s in families[metric]
        if s.labels.get("namespace") == namespace and s.labels.get("pod", "").startswith(pod_prefix)
    ]


def test_metrics_parse_and_carry_pod_labels_for_busy_gpus(sandbox, batch, core, namespace):
    # given a running 2-GPU training job and an idle-annotated 1-GPU job
    batch.create_namespaced_job(
        namespace,
        job_manifest(
            "busy",
            {"nvidia.com/gpu": 2},
            product=A100,
            annotations={"sandbox.gpu-portal.dev/duration": "2h"},
        ),
    )
    batch.create_namespaced_job(
        namespace,
        job_manifest(
            "lazy",
            {"nvidia.com/gpu": 1},
            product=A100,
            annotations={
                "sandbox.gpu-portal.dev/duration": "2h",
                "sandbox.gpu-portal.dev/idle": "true",
            },
        ),
    )
    for job in ("busy", "lazy"):
        wait_for(lambda j=job: batch.read_namespaced_job(j, namespace).status.ready)
    # let a few simulated minutes pass so lagged temperature catches up (speed 60)
    families = wait_for(
        lambda: (
            (f := _scrape(sandbox))
            and len(_pod_samples(f, "DCGM_FI_DEV_GPU_UTIL", namespace, "busy-")) == 2
            and f
        )
    )
    # then the busy GPUs carry pod labels and high utilisation
    busy = _pod_samples(families, "DCGM_FI_DEV_GPU_UTIL", namespace, "busy-")
    assert all(s.labels["container"] == "main" for s in busy)
    assert all(s.labels["modelName"] == "NVIDIA A100-SXM4-80GB" for s in busy)
    assert all(s.labels["UUID"].startswith("GPU-") and s.labels["Hostname"] for s in busy)
    assert {"gpu", "pci_bus_id", "device", "DCGM_FI_DRIVER_VERSION"} <= set(busy[0].labels)
    wait_for(
        lambda: all(
            s.value > 80
            for s in _pod_samples(_scrape(sandbox), "DCGM_FI_DEV_GPU_UTIL", namespace, "busy-")
        ),
        timeout=10,
    )
    # and the idle-annotated pod's GPU sits near 0 %
    lazy = _pod_samples(families, "DCGM_FI_DEV_GPU_UTIL", namespace, "lazy-")
    assert len(lazy) == 1 and lazy[0].value < 3
    # and unheld GPUs have no pod labels at all
    unheld = [s for s in families["DCGM_FI_DEV_GPU_UTIL"] if "pod" not in s.labels]
    assert unheld and all("namespace" not in s.labels for s in unheld)
    assert all(s.value < 5 for s in unheld if not s.labels["Hostname"].startswith("gpu-a100-1"))
    fb_used = _pod_samples(families, "DCGM_FI_DEV_FB_USED", namespace, "busy-")
    assert all(s.value > 40000 for s in fb_used)


def test_mig_devices_have_instance_labels_and_no_gpu_util(sandbox):
    families = _scrape(sandbox)
    mig = [s for s in families["DCGM_FI_PROF_GR_ENGINE_ACTIVE"] if "GPU_I_PROFILE" in s.labels]
    assert {s.labels["GPU_I_PROFILE"] for s in mig} == {"1g.10gb", "2g.20gb", "3g.40gb"}
    assert len([s for s in mig if s.labels["GPU_I_PROFILE"] == "1g.10gb"]) >= 14
    assert not [s for s in families["DCGM_FI_DEV_GPU_UTIL"] if "GPU_I_PROFILE" in s.labels]


def test_hot_and_fb_full_annotations(sandbox, batch, namespace):
    batch.create_namespaced_job(
        namespace,
        job_manifest(
            "toasty",
            {"nvidia.com/gpu": 1},
            product=A100,
            annotations={
                "sandbox.gpu-portal.dev/duration": "2h",
                "sandbox.gpu-portal.dev/hot": "true",
                "sandbox.gpu-portal.dev/fb-full": "true",
            },
        ),
    )
    wait_for(lambda: batch.read_namespaced_job("toasty", namespace).status.ready)
    families = wait_for(
        lambda: (
            (f := _scrape(sandbox))
            and _pod_samples(f, "DCGM_FI_DEV_GPU_TEMP", namespace, "toasty-")
            and f
        )
    )
    assert _pod_samples(families, "DCGM_FI_DEV_GPU_TEMP", namespace, "toasty-")[0].value > 85
    assert _pod_samples(families, "DCGM_FI_DEV_FB_FREE", namespace, "toasty-")[0].value < 1024


def test_time_sliced_gpu_series_repeat_per_sharing_pod(sandbox, core, namespace):
    from conftest import pod_manifest

    for name in ("share-a", "share-b"):
        core.create_namespaced_pod(
            namespace,
            pod_manifest(
                name,
                {"nvidia.com/gpu.shared": 3},
                annotations={"sandbox.gpu-portal.dev/duration": "2h"},
            ),
        )
    for name in ("share-a", "share-b"):
        wait_for(lambda n=name: core.read_namespaced_pod(n, namespace).status.phase == "Running")
    families = _scrape(sandbox)
    samples = _pod_samples(families, "DCGM_FI_DEV_GPU_UTIL", namespace, "share-")
    by_uuid: dict[str, set[str]] = {}
    for s in samples:
        by_uuid.setdefault(s.labels["UUID"], set()).add(s.labels["pod"])
    # 3 + 3 replicas over 2 physical T4s (4 replicas each): at least one GPU is shared by both
    assert any(len(pods) == 2 for pods in by_uuid.values())
    assert all(s.labels["modelName"] == "Tesla T4" for s in samples)
