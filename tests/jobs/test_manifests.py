"""Manifest builders: golden files, schema validation, and the behaviour users rely on.

Golden files live in ``tests/jobs/golden/<case>.yaml`` and are compared byte for
byte with ``to_yaml(build_manifests(spec, ctx))``. After an intended change to
the builders, regenerate them and review the diff::

    UPDATE_GOLDEN=1 .venv/bin/pytest tests/jobs/test_manifests.py

Without ``UPDATE_GOLDEN=1`` a missing golden file fails its test.
"""

from __future__ import annotations

import itertools
import os
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import yaml

from cluster.labels import (
    COMPONENT_LABEL,
    JOB_ID_LABEL,
    MANAGED_BY_LABEL,
    MANAGED_BY_SELECTOR,
    NAME_LABEL,
    TEAM_LABEL,
)
from cluster.priority_classes import PRIORITIES, priority_classes
from jobs.manifests import (
    CONTAINER_NAME,
    DISTRIBUTED_ENV_NAMES,
    ManifestContext,
    UnsupportedKubernetesVersion,
    available_schema_versions,
    build_manifests,
    container_resources,
    gpu_resource_name,
    object_name,
    parse_quantity,
    resource_defaults,
    schema_version_for,
    to_yaml,
    validate_manifests,
    validation,
)
from jobs.manifests.context import WorkspaceContext
from jobs.spec import GpuRequest, JobSpec, VolumeMount
from sandbox.controlplane.plane import build_components

GOLDEN_DIR = Path(__file__).parent / "golden"
K8S_VERSION = "1.33"
A100_80GB = "NVIDIA-A100-SXM4-80GB"
CTX_FOR_VARIANTS = ManifestContext(job_id=7, namespace="team-vision")
COMPLETION_INDEX_PATH = "metadata.annotations['batch.kubernetes.io/job-completion-index']"

GOLDEN_CASES: dict[str, tuple[JobSpec, ManifestContext]] = {
    "single_gpu_training": (
        JobSpec(
            team="vision",
            name="resnet50",
            kind="training",
            image="nvcr.io/nvidia/pytorch:24.05-py3",
            command=("python", "train.py"),
            args=("--epochs", "10"),
            env={"NCCL_DEBUG": "WARN"},
            gpu=GpuRequest(count=1),
            max_runtime_seconds=86400,
            retries=2,
        ),
        ManifestContext(job_id=101, namespace="team-vision"),
    ),
    "a100_8gpu_training": (
        JobSpec(
            team="nlp",
            name="llama-finetune",
            kind="training",
            image="nvcr.io/nvidia/pytorch:24.05-py3",
            command=("torchrun", "--nproc-per-node=8", "finetune.py"),
            env={"WANDB_MODE": "offline", "HF_HOME": "/checkpoints/hf"},
            gpu=GpuRequest(count=8, product=A100_80GB),
            priority="high",
            volumes=(
                VolumeMount(claim="datasets", mount_path="/data", read_only=True),
                VolumeMount(claim="checkpoints", mount_path="/checkpoints"),
            ),
            max_runtime_seconds=7 * 86400,
            retries=1,
        ),
        ManifestContext(job_id=202, namespace="team-nlp"),
    ),
    "distributed_training": (
        JobSpec(
            team="nlp",
            name="gpt-pretrain",
            kind="training",
            image="registry.example.com/nlp/gpt:1.4",
            command=("torchrun",),
            args=("pretrain.py", "--config", "configs/350m.yaml"),
            env={"NCCL_DEBUG": "INFO"},
            gpu=GpuRequest(count=2, product=A100_80GB),
            volumes=(VolumeMount(claim="datasets", mount_path="/data", read_only=True),),
            workers=4,
            retries=3,
        ),
        ManifestContext(job_id=303, namespace="team-nlp"),
    ),
    "pytorchjob_training": (
        JobSpec(
            team="nlp",
            name="gpt-ddp",
            kind="training",
            image="registry.example.com/nlp/gpt:1.4",
            command=("torchrun",),
            args=("pretrain.py",),
            gpu=GpuRequest(count=2, product=A100_80GB),
            launcher="pytorchjob",
            workers=3,
            retries=1,
        ),
        ManifestContext(job_id=404, namespace="team-nlp"),
    ),
    "trainjob_training": (
        JobSpec(
            team="nlp",
            name="llama-ft",
            kind="training",
            image="registry.example.com/nlp/llama:2.1",
            command=("torchrun",),
            args=("finetune.py", "--epochs", "3"),
            env={"NCCL_DEBUG": "INFO"},
            gpu=GpuRequest(count=2, product=A100_80GB),
            launcher="trainjob",
            workers=2,
            max_runtime_seconds=7200,
        ),
        ManifestContext(job_id=505, namespace="team-nlp"),
    ),
    "mig_inference": (
        JobSpec(
            team="search",
            name="embedder",
            kind="inference",
            image="registry.example.com/search/embedder:2.0",
            args=("--model", "/models/e5-large"),
            gpu=GpuRequest(count=1, sharing="mig", mig_profile="1g.10gb"),
            priority="critical",
            volumes=(VolumeMount(claim="models", mount_path="/models", read_only=True),),
            replicas=2,
            port=8000,
            health_path="/health",
        ),
        ManifestContext(job_id=404, namespace="team-search"),
    ),
    "time_sliced_inference": (
        JobSpec(
            team="search",
            name="reranker-dev",
            kind="inference",
            image="registry.example.com/search/reranker:0.3",
            env={"LOG_LEVEL": "debug", "BATCH_SIZE": "8"},
            gpu=GpuRequest(count=1, sharing="shared"),
            priority="low",
        ),
        ManifestContext(
            job_id=505, namespace="team-search", shared_gpu_resource="nvidia.com/gpu.shared"
        ),
    ),
    "shared_t4_workspace": (
        JobSpec(
            team="vision",
            name="explore",
            kind="workspace",
            image="quay.io/jupyter/pytorch-notebook:cuda12-2026-11-24",
            workspace_image="jupyter-pytorch",
            env={"HF_HOME": "/data/hf"},
            gpu=GpuRequest(count=1, product="Tesla-T4", sharing="shared"),
            volumes=(VolumeMount(claim="datasets", mount_path="/data", read_only=True),),
        ),
        ManifestContext(
            job_id=707,
            namespace="team-vision",
            shared_gpu_resource="nvidia.com/gpu.shared",
            workspace=WorkspaceContext(
                flavor="jupyter",
                command=("start-notebook.py",),
                port=8888,
                home_path="/home/jovyan",
                home_claim="home-alice",
                base_url="/workspaces/707/",
            ),
        ),
    ),
    "cpu_only_job": (
        JobSpec(
            team="vision",
            name="shard-dataset",
            kind="training",
            image="python:3.11-slim",
            command=("python", "-m", "tools.shard"),
            args=("--shards", "64"),
            priority="low",
            volumes=(VolumeMount(claim="datasets", mount_path="/data"),),
            max_runtime_seconds=3600,
        ),
        ManifestContext(job_id=606, namespace="team-vision"),
    ),
}


# --- helpers -----------------------------------------------------------------


def build(case: str) -> list[dict[str, Any]]:
    spec, ctx = GOLDEN_CASES[case]
    return build_manifests(spec, ctx)


def pod_templates(manifests: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The pod template of each workload: a Job's or Deployment's, a PyTorchJob's Master
    replica's (its Workers' is the same template: test_the_pytorchjob_is_valid_…)."""
    found = [m["spec"]["template"] for m in manifests if m["kind"] in ("Job", "Deployment")]
    found += [
        m["spec"]["pytorchReplicaSpecs"]["Master"]["template"]
        for m in manifests
        if m["kind"] == "PyTorchJob"
    ]
    found += [trainjob_pod(m) for m in manifests if m["kind"] == "TrainJob"]
    return found


def trainjob_pod(trainjob: dict[str, Any]) -> dict[str, Any]:
    """What the portal gives a TrainJob's trainer pods, as Trainer puts it together: the
    runtime patch's pod template, its container ``node`` with the trainer's fields."""
    spec = trainjob["spec"]
    (patch,) = spec["runtimePatches"]
    (node,) = patch["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"]
    pod = node["template"]["spec"]["template"]
    (container,) = pod["spec"]["containers"]
    trainer = spec["trainer"]
    merged = {
        **container,
        "image": trainer["image"],
        **{k: trainer[k] for k in ("command", "args", "env") if k in trainer},
        "resources": trainer["resourcesPerNode"],
    }
    return {**pod, "spec": {**pod["spec"], "containers": [merged]}}


def main_container(manifests: list[dict[str, Any]]) -> dict[str, Any]:
    (template,) = pod_templates(manifests)
    (container,) = template["spec"]["containers"]
    # (the training operator finds a PyTorchJob's container by its name, Trainer a TrainJob's)
    assert container["name"] in (CONTAINER_NAME, "pytorch", "node")
    return container


def env_by_name(container: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {item["name"]: item for item in container.get("env", [])}


def spec_variants() -> list[JobSpec]:
    """Every shape the portal can produce, crossed with the optional features."""
    shapes: list[dict[str, Any]] = [
        {"kind": "training", "workers": 1},
        {"kind": "training", "workers": 2},
        {"kind": "training", "workers": 8},
        {"kind": "inference", "replicas": 1},
        {"kind": "inference", "replicas": 3},
    ]
    gpus = [
        GpuRequest(count=0),
        GpuRequest(count=1),
        GpuRequest(count=8),
        GpuRequest(count=1, sharing="mig", mig_profile="1g.10gb"),
        GpuRequest(count=2, sharing="mig", mig_profile="3g.40gb"),
        GpuRequest(count=1, sharing="shared"),
    ]
    volume_sets: list[tuple[VolumeMount, ...]] = [
        (),
        (VolumeMount("data", "/data", read_only=True), VolumeMount("out.v1", "/out")),
    ]
    env_sets: list[dict[str, str]] = [{}, {"B_VAR": "2", "A_VAR": "a b c", "EMPTY": ""}]
    products = [None, A100_80GB]
    variants = []
    for shape, gpu, priority, product, volumes, env in itertools.product(
        shapes, gpus, PRIORITIES, products, volume_sets, env_sets
    ):
        variants.append(
            JobSpec(
                team="vision",
                name="variant",
                kind=shape["kind"],
                image="registry.example.com/x:1",
                command=("python",) if env else (),
                args=("run.py",) if volumes else (),
                env=env,
                gpu=GpuRequest(
                    count=gpu.count,
                    product=product if gpu.count else None,
                    sharing=gpu.sharing,
                    mig_profile=gpu.mig_profile,
                ),
                priority=priority,
                volumes=volumes,
                workers=shape.get("workers", 1),
                replicas=shape.get("replicas", 1),
                max_runtime_seconds=600 if product else None,
                cpu="3500m" if priority == "high" else None,
                memory="20G" if priority == "high" else None,
            )
        )
    return variants


# --- golden files --------------------------------------------------------------


@pytest.mark.parametrize("case", sorted(GOLDEN_CASES))
def test_manifests_match_golden_file(case: str) -> None:
    # given a representative spec
    spec, ctx = GOLDEN_CASES[case]
    golden = GOLDEN_DIR / f"{case}.yaml"

    # when it is built and rendered
    rendered = to_yaml(build_manifests(spec, ctx))

    # then the YAML is exactly what was reviewed
    if os.environ.get("UPDATE_GOLDEN") == "1":
        GOLDEN_DIR.mkdir(exist_ok=True)
        golden.write_text(rendered, encoding="utf-8")
    assert golden.exists(), f"{golden} is missing; run with UPDATE_GOLDEN=1 to create it"
    assert rendered == golden.read_text(encoding="utf-8")


@pytest.mark.parametrize("case", sorted(GOLDEN_CASES))
def test_golden_yaml_round_trips_to_the_same_objects(case: str) -> None:
    manifests = build(case)

    documents = list(yaml.safe_load_all(to_yaml(manifests)))

    assert documents == manifests


# --- schema validation -----------------------------------------------------------


@pytest.mark.parametrize("case", sorted(GOLDEN_CASES))
def test_golden_manifests_are_schema_valid(case: str) -> None:
    assert validate_manifests(build(case), K8S_VERSION) == []


@pytest.mark.parametrize("version", ["1.30", "1.31", "1.32", "1.33"])
def test_golden_manifests_are_valid_on_every_supported_cluster_version(version: str) -> None:
    for case in GOLDEN_CASES:
        assert validate_manifests(build(case), version) == [], case


def test_every_spec_variant_is_schema_valid() -> None:
    # given every shape × GPU mode × priority × product × volumes × env
    variants = spec_variants()
    assert len(variants) == 5 * 6 * 4 * 2 * 2 * 2

    errors: list[str] = []
    for job_id, spec in enumerate(variants, start=1):
        ctx = ManifestContext(job_id=job_id, namespace="team-vision")
        errors.extend(validate_manifests(build_manifests(spec, ctx), K8S_VERSION))

    assert errors == []


def test_priority_classes_are_schema_valid() -> None:
    assert validate_manifests(priority_classes(), K8S_VERSION) == []


def test_validator_agrees_with_kubernetes_validate() -> None:
    # given the library's own (uncached, first-error) validator, for Kubernetes' own kinds
    # (a PyTorchJob and a TrainJob are checked against their CRDs below)
    for case in GOLDEN_CASES:
        for manifest in build(case):
            if manifest["apiVersion"] not in ("kubeflow.org/v1", "trainer.kubeflow.org/v1alpha1"):
                kubernetes_validate.validate(manifest, K8S_VERSION, strict=True)

    broken = build("mig_inference")[0]
    broken["spec"]["replicas"] = "x"
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(broken, K8S_VERSION, strict=True)
    assert validate_manifests([broken], K8S_VERSION) != []


def _breakages(manifest: dict[str, Any]) -> list[dict[str, Any]]:
    """Copies of a Job or Deployment, each broken (or not) in one way the schema decides."""
    cases: list[Any] = [
        ("spec", "backoffLimit", True),  # a bool is not an integer
        ("spec", "backoffLimit", 1.0),  # a whole float is one
        ("spec", "backoffLimit", 1.5),
        ("spec", "backoffLimit", "1"),
        ("spec", "backoffLimit", None),  # null is allowed: the schemas say [type, null]
        ("spec", "bogus", 1),  # strict: no unknown fields
        ("metadata", "labels", {"a": 1}),
        ("metadata", "name", ["x"]),
        ("container", "resources", {"limits": {"cpu": 2}}),  # int-or-string quantity
        ("container", "resources", {"limits": {"cpu": False}}),
        ("container", "ports", [{"name": "http"}]),  # containerPort is required
        ("container", "imagePullPolicy", 3),
        ("container", "securityContext", {"capabilities": {"drop": "ALL"}}),
        ("container", "env", [{"name": "A", "valueFrom": {"fieldRef": {}}}]),  # fieldPath
    ]
    broken = []
    for where, key, value in cases:
        copy = yaml.safe_load(yaml.safe_dump(manifest))
        target = {
            "spec": copy["spec"],
            "metadata": copy["metadata"],
            "container": copy["spec"]["template"]["spec"]["containers"][0],
        }[where]
        target[key] = value
        broken.append(copy)
    return broken


def test_the_fast_schema_check_agrees_with_jsonschema() -> None:
    # given every manifest the builders produce, and broken copies of the workloads
    manifests = [m for spec in spec_variants() for m in build_manifests(spec, CTX_FOR_VARIANTS)]
    workloads = [m for m in manifests if m["kind"] in ("Job", "Deployment")]
    samples = manifests + [b for m in workloads[::40] for b in _breakages(m)]
    version = schema_version_for(K8S_VERSION)

    for manifest in samples:
        file_name = validation._schema_file_name(manifest["kind"], manifest["apiVersion"])
        fast = validation._fast_validator(version, file_name)
        slow = validation._validator(version, file_name)
        if fast is None or slow is None:
            assert fast is None and slow is None
            continue
        # then jsonschema_rs passes exactly what jsonschema passes
        assert fast.is_valid(manifest) == slow.is_valid(manifest), manifest


def test_what_is_not_plain_json_is_judged_by_jsonschema() -> None:
    # given a Job with a tuple where the schema wants an array (jsonschema_rs would pass it)
    manifests = build("single_gpu_training")
    manifests[0]["spec"]["template"]["spec"]["containers"][0]["args"] = ("--epochs", "10")

    errors = validate_manifests(manifests, K8S_VERSION)

    assert len(errors) == 1
    assert errors[0].startswith("Job/resnet50-101: spec.template.spec.containers[0].args: ")


def test_a_wrongly_typed_field_is_reported_with_object_and_field() -> None:
    # given a Deployment with a string where the schema wants an integer
    manifests = build("mig_inference")
    manifests[0]["spec"]["replicas"] = "x"

    errors = validate_manifests(manifests, K8S_VERSION)

    assert len(errors) == 1
    assert errors[0].startswith("Deployment/embedder-404: spec.replicas: ")
    assert "'x'" in errors[0]


def test_unknown_fields_are_reported_because_validation_is_strict() -> None:
    manifests = build("single_gpu_training")
    container = manifests[0]["spec"]["template"]["spec"]["containers"][0]
    container["privileged"] = True  # belongs in securityContext, not here

    errors = validate_manifests(manifests, K8S_VERSION)

    assert len(errors) == 1
    assert "Job/resnet50-101: spec.template.spec.containers[0]" in errors[0]
    assert "privileged" in errors[0]


def test_every_error_is_reported_not_just_the_first() -> None:
    manifests = build("distributed_training")
    manifests[0]["spec"]["clusterIP"] = 1
    manifests[1]["spec"]["completions"] = "four"

    errors = validate_manifests(manifests, K8S_VERSION)

    assert [e.split(":")[0] for e in errors] == ["Service/gpt-pretrain-303", "Job/gpt-pretrain-303"]


def test_a_kind_without_schema_is_an_error() -> None:
    errors = validate_manifests(
        [{"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w"}}],
        K8S_VERSION,
    )

    assert errors == ["Widget/w: no schema for example.com/v1 Widget in Kubernetes 1.33"]


def test_cluster_versions_map_to_the_closest_shipped_schema() -> None:
    newest = available_schema_versions()[-1]

    assert schema_version_for("1.33") == "1.33"
    assert schema_version_for("v1.33.4") == "1.33"
    assert schema_version_for("1.99") == newest
    with pytest.raises(UnsupportedKubernetesVersion):
        schema_version_for("1.10")
    with pytest.raises(UnsupportedKubernetesVersion):
        schema_version_for("latest")


# --- GPU resources -----------------------------------------------------------------


@pytest.mark.parametrize("case", sorted(GOLDEN_CASES))
def test_gpu_limits_equal_requests(case: str) -> None:
    resources = main_container(build(case))["resources"]

    assert resources["limits"] == resources["requests"]


@pytest.mark.parametrize(
    ("gpu", "expected"),
    [
        (GpuRequest(count=0), None),
        (GpuRequest(count=2), "nvidia.com/gpu"),
        (GpuRequest(count=1, sharing="mig", mig_profile="1g.10gb"), "nvidia.com/mig-1g.10gb"),
        (GpuRequest(count=1, sharing="shared"), "nvidia.com/gpu.shared"),
    ],
)
def test_gpu_resource_name_per_sharing_mode(gpu: GpuRequest, expected: str | None) -> None:
    spec = JobSpec(team="t", name="n", kind="training", image="i", gpu=gpu)

    assert gpu_resource_name(spec, ManifestContext(job_id=1, namespace="ns")) == expected


def test_shared_gpu_resource_follows_the_cluster_time_slicing_config() -> None:
    # given a cluster whose time-slicing keeps the plain resource name
    spec, _ = GOLDEN_CASES["time_sliced_inference"]
    ctx = ManifestContext(job_id=1, namespace="ns", shared_gpu_resource="nvidia.com/gpu")

    limits = main_container(build_manifests(spec, ctx))["resources"]["limits"]

    assert limits["nvidia.com/gpu"] == "1"
    assert "nvidia.com/gpu.shared" not in limits


def test_mig_resource_is_requested_per_slice() -> None:
    limits = main_container(build("mig_inference"))["resources"]["limits"]

    assert limits == {"cpu": "2", "memory": "8Gi", "nvidia.com/mig-1g.10gb": "1"}


def test_mig_without_profile_is_refused() -> None:
    spec = JobSpec(team="t", name="n", kind="inference", image="i", gpu=GpuRequest(1, None, "mig"))

    with pytest.raises(ValueError, match="mig_profile"):
        build_manifests(spec, ManifestContext(job_id=1, namespace="ns"))


@pytest.mark.parametrize(
    ("gpu", "cpu", "memory"),
    [
        (GpuRequest(count=0), "1", "2Gi"),
        (GpuRequest(count=1), "8", "16Gi"),
        (GpuRequest(count=8), "64", "128Gi"),
        (GpuRequest(count=1, sharing="mig", mig_profile="1g.10gb"), "2", "8Gi"),
        (GpuRequest(count=2, sharing="mig", mig_profile="1g.10gb"), "4", "16Gi"),
        (GpuRequest(count=1, sharing="mig", mig_profile="3g.40gb"), "4", "8Gi"),
        (GpuRequest(count=1, sharing="mig", mig_profile="4g.40gb"), "5", "10Gi"),
        (GpuRequest(count=1, sharing="mig", mig_profile="7g.80gb"), "8", "16Gi"),
        (GpuRequest(count=1, sharing="shared"), "2", "8Gi"),
        (GpuRequest(count=2, sharing="shared"), "4", "16Gi"),
    ],
)
def test_resource_defaults_per_sharing_mode(gpu: GpuRequest, cpu: str, memory: str) -> None:
    spec = JobSpec(team="t", name="n", kind="training", image="i", gpu=gpu)

    defaults = resource_defaults(spec)

    assert defaults == {
        "requests": {"cpu": cpu, "memory": memory},
        "limits": {"cpu": cpu, "memory": memory},
    }


def test_spec_cpu_and_memory_override_the_defaults_one_by_one() -> None:
    ctx = ManifestContext(job_id=1, namespace="ns")
    base = JobSpec(team="t", name="n", kind="training", image="i", gpu=GpuRequest(count=1))

    only_cpu = container_resources(JobSpec(**{**base.__dict__, "cpu": "4"}), ctx)
    only_memory = container_resources(JobSpec(**{**base.__dict__, "memory": "40Gi"}), ctx)

    assert only_cpu["limits"] == {"cpu": "4", "memory": "16Gi", "nvidia.com/gpu": "1"}
    assert only_memory["requests"] == {"cpu": "8", "memory": "40Gi", "nvidia.com/gpu": "1"}


def test_applied_resources_are_the_advertised_defaults() -> None:
    # given what the submit form shows as "resource defaults that will be applied"
    for case, (spec, _) in GOLDEN_CASES.items():
        defaults = resource_defaults(spec)

        limits = main_container(build(case))["resources"]["limits"]

        assert {k: limits[k] for k in ("cpu", "memory")} == defaults["limits"], case


# --- scheduling constraints ------------------------------------------------------


@pytest.mark.parametrize("case", sorted(GOLDEN_CASES))
def test_gpu_toleration_present_iff_gpus_requested(case: str) -> None:
    spec, _ = GOLDEN_CASES[case]
    (template,) = pod_templates(build(case))

    tolerations = template["spec"].get("tolerations", [])

    expected = (
        [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
        if spec.gpu.count
        else []
    )
    assert tolerations == expected


@pytest.mark.parametrize("case", sorted(GOLDEN_CASES))
def test_product_node_affinity_present_iff_product_chosen(case: str) -> None:
    spec, _ = GOLDEN_CASES[case]
    (template,) = pod_templates(build(case))

    node_affinity = template["spec"].get("affinity", {}).get("nodeAffinity")

    if spec.gpu.product:
        # GPU Feature Discovery labels a time-sliced node's product with "-SHARED".
        products = [spec.gpu.product]
        if spec.gpu.sharing == "shared":
            products.append(f"{spec.gpu.product}-SHARED")
        required = node_affinity["requiredDuringSchedulingIgnoredDuringExecution"]
        assert required["nodeSelectorTerms"] == [
            {
                "matchExpressions": [
                    {"key": "nvidia.com/gpu.product", "operator": "In", "values": products}
                ]
            }
        ]
    else:
        assert node_affinity is None


def test_product_without_gpus_adds_no_affinity() -> None:
    spec = JobSpec(
        team="t", name="n", kind="training", image="i", gpu=GpuRequest(0, product=A100_80GB)
    )

    (template,) = pod_templates(build_manifests(spec, ManifestContext(job_id=1, namespace="n")))

    assert "affinity" not in template["spec"]


@pytest.mark.parametrize("case", sorted(GOLDEN_CASES))
def test_shm_volume_only_for_gpu_jobs(case: str) -> None:
    spec, _ = GOLDEN_CASES[case]
    manifests = build(case)
    (template,) = pod_templates(manifests)
    container = main_container(manifests)

    shm_mounts = [m for m in container.get("volumeMounts", []) if m["mountPath"] == "/dev/shm"]
    memory_volumes = [
        v for v in template["spec"].get("volumes", []) if v.get("emptyDir", {}).get("medium")
    ]

    if spec.gpu.count:
        assert len(shm_mounts) == 1 and len(memory_volumes) == 1
        assert shm_mounts[0]["name"] == memory_volumes[0]["name"]
        assert memory_volumes[0]["emptyDir"]["medium"] == "Memory"
        limit = parse_quantity(container["resources"]["limits"]["memory"])
        size = parse_quantity(memory_volumes[0]["emptyDir"]["sizeLimit"])
        assert size <= limit / 2
    else:
        assert shm_mounts == [] and memory_volumes == []


def test_shm_is_half_the_memory_limit_capped_at_32gi() -> None:
    single = main_container(build("single_gpu_training"))  # 16Gi memory
    eight = main_container(build("a100_8gpu_training"))  # 128Gi memory

    def shm_size(manifests: list[dict[str, Any]]) -> str:
        (template,) = pod_templates(manifests)
        (volume,) = [v for v in template["spec"]["volumes"] if "emptyDir" in v]
        return str(volume["emptyDir"]["sizeLimit"])

    assert single["resources"]["limits"]["memory"] == "16Gi"
    assert shm_size(build("single_gpu_training")) == "8Gi"
    assert eight["resources"]["limits"]["memory"] == "128Gi"
    assert shm_size(build("a100_8gpu_training")) == "32Gi"


def test_pvc_volumes_are_mounted_with_their_read_only_flag() -> None:
    manifests = build("a100_8gpu_training")
    (template,) = pod_templates(manifests)
    volumes = {v["name"]: v for v in template["spec"]["volumes"]}

    mounts = {m["mountPath"]: m for m in main_container(manifests)["volumeMounts"]}

    data, checkpoints = mounts["/data"], mounts["/checkpoints"]
    assert data["readOnly"] is True and checkpoints["readOnly"] is False
    assert volumes[data["name"]]["persistentVolumeClaim"] == {
        "claimName": "datasets",
        "readOnly": True,
    }
    assert volumes[checkpoints["name"]]["persistentVolumeClaim"] == {
        "claimName": "checkpoints",
        "readOnly": False,
    }


@pytest.mark.parametrize("priority", PRIORITIES)
def test_priority_class_name_follows_the_spec_priority(priority: str) -> None:
    spec, ctx = GOLDEN_CASES["single_gpu_training"]
    spec = JobSpec(**{**spec.__dict__, "priority": priority})

    (template,) = pod_templates(build_manifests(spec, ctx))

    assert template["spec"]["priorityClassName"] == f"gpu-{priority}"
    assert f"gpu-{priority}" in {pc["metadata"]["name"] for pc in priority_classes()}


def test_priority_classes_follow_seed_004_without_a_global_default() -> None:
    classes = {pc["metadata"]["name"]: pc for pc in priority_classes()}

    assert {name: pc["value"] for name, pc in classes.items()} == {
        "gpu-critical": 1_000_000,
        "gpu-high": 100_000,
        "gpu-normal": 10_000,
        "gpu-low": 1_000,
    }
    assert all(pc["globalDefault"] is False for pc in classes.values())
    assert classes["gpu-low"]["preemptionPolicy"] == "Never"
    assert classes["gpu-high"]["preemptionPolicy"] == "PreemptLowerPriority"
    assert all(pc["description"] for pc in classes.values())
    assert all("namespace" not in pc["metadata"] for pc in classes.values())


# --- security by construction ------------------------------------------------------

POD_SPEC_KEYS = {
    "subdomain",
    "restartPolicy",
    "priorityClassName",
    "automountServiceAccountToken",
    "enableServiceLinks",
    "securityContext",
    "affinity",
    "tolerations",
    "containers",
    "volumes",
}
CONTAINER_KEYS = {
    "name",
    "image",
    "command",
    "args",
    "env",
    "ports",
    "resources",
    "volumeMounts",
    "startupProbe",
    "readinessProbe",
    "livenessProbe",
    "securityContext",
}


@pytest.mark.parametrize("case", sorted(GOLDEN_CASES))
def test_every_pod_runs_with_restricted_security_settings(case: str) -> None:
    for template in pod_templates(build(case)):
        pod = template["spec"]

        assert pod["securityContext"] == {
            "runAsNonRoot": True,
            "runAsUser": 1000,
            "runAsGroup": 1000,
            "fsGroup": 1000,
            "fsGroupChangePolicy": "OnRootMismatch",
            "seccompProfile": {"type": "RuntimeDefault"},
        }
        if "serviceAccountName" in pod:
            # A TrainJob's pods, whose runtime patch cannot set these: they run as the
            # team's ServiceAccount that mounts no token (teams.cluster_sync)
            assert pod["serviceAccountName"] == "gpu-portal-workload"
        else:
            assert pod["automountServiceAccountToken"] is False
            assert pod["enableServiceLinks"] is False
        for container in pod["containers"]:
            assert container["securityContext"] == {
                "allowPrivilegeEscalation": False,
                "capabilities": {"drop": ["ALL"]},
                "runAsNonRoot": True,
            }


def test_pods_only_ever_carry_allow_listed_keys() -> None:
    for job_id, spec in enumerate(spec_variants(), start=1):
        manifests = build_manifests(spec, ManifestContext(job_id=job_id, namespace="n"))
        for template in pod_templates(manifests):
            assert set(template["spec"]) <= POD_SPEC_KEYS
            for container in template["spec"]["containers"]:
                assert set(container) <= CONTAINER_KEYS
            for volume in template["spec"].get("volumes", []):
                assert set(volume) - {"name"} <= {"persistentVolumeClaim", "emptyDir"}


def test_command_and_args_only_when_given() -> None:
    with_both = main_container(build("single_gpu_training"))
    args_only = main_container(build("mig_inference"))
    neither = main_container(build("time_sliced_inference"))

    assert with_both["command"] == ["python", "train.py"]
    assert with_both["args"] == ["--epochs", "10"]
    assert "command" not in args_only and args_only["args"] == ["--model", "/models/e5-large"]
    assert "command" not in neither and "args" not in neither


# --- workspaces -----------------------------------------------------------------


def test_a_workspace_token_is_never_in_its_stored_manifests() -> None:
    # given a workspace's manifests (what the portal stores, previews and returns)
    manifests = build("shared_t4_workspace")

    # then its Secret carries no value (the apply step fills it in), and the server takes
    # the token from that Secret, never from a literal
    (secret,) = [m for m in manifests if m["kind"] == "Secret"]
    assert "data" not in secret and "stringData" not in secret
    (template,) = pod_templates(manifests)
    env = {e["name"]: e for e in template["spec"]["containers"][0]["env"]}
    assert env["JUPYTER_TOKEN"] == {
        "name": "JUPYTER_TOKEN",
        "valueFrom": {"secretKeyRef": {"name": secret["metadata"]["name"], "key": "token"}},
    }


def test_a_workspace_mounts_its_owners_home_and_serves_under_the_portal_path() -> None:
    manifests = build("shared_t4_workspace")
    (deployment,) = [m for m in manifests if m["kind"] == "Deployment"]

    pod = deployment["spec"]["template"]["spec"]
    container = pod["containers"][0]
    assert deployment["spec"]["replicas"] == 1
    assert deployment["spec"]["strategy"] == {"type": "Recreate"}  # the claim is RWO
    assert {"name": "home", "persistentVolumeClaim": {"claimName": "home-alice"}} in pod["volumes"]
    assert {"name": "home", "mountPath": "/home/jovyan"} in container["volumeMounts"]
    assert "--ServerApp.base_url=/workspaces/707/" in container["args"]
    assert container["readinessProbe"]["httpGet"]["path"] == "/workspaces/707/api"


# --- metadata and naming -----------------------------------------------------------


@pytest.mark.parametrize("case", sorted(GOLDEN_CASES))
def test_namespace_and_labels_on_every_object_and_pod(case: str) -> None:
    spec, ctx = GOLDEN_CASES[case]
    expected_labels = {
        MANAGED_BY_LABEL: "gpu-portal",
        NAME_LABEL: spec.name,
        COMPONENT_LABEL: spec.kind,
        JOB_ID_LABEL: str(ctx.job_id),
        TEAM_LABEL: spec.team,
    }
    manifests = build(case)

    for manifest in manifests:
        assert manifest["metadata"]["namespace"] == ctx.namespace
        assert manifest["metadata"]["labels"] == expected_labels
        # one name per job; a workspace's token Secret is the one object named beside it
        expected_name = object_name(spec, ctx)
        if manifest["kind"] == "Secret":
            expected_name += "-token"
        assert manifest["metadata"]["name"] == expected_name
    for template in pod_templates(manifests):
        assert template["metadata"]["labels"] == expected_labels


def test_label_selector_constants() -> None:
    assert MANAGED_BY_SELECTOR == "app.kubernetes.io/managed-by=gpu-portal"
    assert JOB_ID_LABEL == "gpu-portal.dev/job-id"
    assert TEAM_LABEL == "gpu-portal.dev/team"


@pytest.mark.parametrize("case", sorted(GOLDEN_CASES))
def test_names_and_output_are_deterministic(case: str) -> None:
    spec, ctx = GOLDEN_CASES[case]

    first, second = build_manifests(spec, ctx), build_manifests(spec, ctx)

    assert object_name(spec, ctx) == f"{spec.name}-{ctx.job_id}"
    assert first == second
    assert to_yaml(first) == to_yaml(second)


def test_user_env_is_sorted_by_name_as_plain_pairs() -> None:
    container = main_container(build("time_sliced_inference"))

    assert container["env"] == [
        {"name": "BATCH_SIZE", "value": "8"},
        {"name": "LOG_LEVEL", "value": "debug"},
    ]


def test_env_order_does_not_depend_on_dict_order() -> None:
    spec, ctx = GOLDEN_CASES["single_gpu_training"]
    a = JobSpec(**{**spec.__dict__, "env": {"Z": "1", "A": "2", "M": "3"}})
    b = JobSpec(**{**spec.__dict__, "env": {"M": "3", "Z": "1", "A": "2"}})

    env_a = main_container(build_manifests(a, ctx))["env"]
    env_b = main_container(build_manifests(b, ctx))["env"]

    assert env_a == env_b
    assert [item["name"] for item in env_a] == ["A", "M", "Z"]


# --- workload shapes ---------------------------------------------------------------


def test_single_worker_training_is_one_plain_job() -> None:
    manifests = build("single_gpu_training")

    (job,) = manifests
    assert (job["apiVersion"], job["kind"]) == ("batch/v1", "Job")
    assert job["spec"]["completions"] == 1 and job["spec"]["parallelism"] == 1
    assert job["spec"]["backoffLimit"] == 2
    assert job["spec"]["activeDeadlineSeconds"] == 86400
    assert "completionMode" not in job["spec"]
    assert job["spec"]["template"]["spec"]["restartPolicy"] == "Never"
    assert not set(env_by_name(main_container(manifests))) & DISTRIBUTED_ENV_NAMES


def test_no_deadline_when_max_runtime_is_unset() -> None:
    (_, job) = build("distributed_training")

    assert "activeDeadlineSeconds" not in job["spec"]


def test_distributed_training_reaches_worker_zero_through_the_headless_service() -> None:
    # given a 4-worker job with 2 GPUs each
    manifests = build("distributed_training")

    # then a headless Service comes first, selecting the workers
    service, job = manifests
    assert (service["kind"], job["kind"]) == ("Service", "Job")
    assert service["spec"]["clusterIP"] == "None"
    assert service["spec"]["publishNotReadyAddresses"] is True
    pod_labels = job["spec"]["template"]["metadata"]["labels"]
    assert service["spec"]["selector"].items() <= pod_labels.items()
    assert service["spec"]["ports"][0]["port"] == 29500

    # and the Indexed Job's pods resolve as <job>-<index>.<service>
    assert job["spec"]["completionMode"] == "Indexed"
    assert job["spec"]["completions"] == job["spec"]["parallelism"] == 4
    assert job["spec"]["backoffLimit"] == 3
    pod = job["spec"]["template"]["spec"]
    assert pod["subdomain"] == service["metadata"]["name"]
    assert pod["restartPolicy"] == "Never"
    env = env_by_name(pod["containers"][0])
    worker_zero = f"{job['metadata']['name']}-0.{service['metadata']['name']}"
    assert worker_zero == "gpt-pretrain-303-0.gpt-pretrain-303"
    assert env["MASTER_ADDR"]["value"] == env["PET_MASTER_ADDR"]["value"] == worker_zero
    assert env["MASTER_PORT"]["value"] == env["PET_MASTER_PORT"]["value"] == "29500"
    assert env["WORLD_SIZE"]["value"] == env["PET_NNODES"]["value"] == "4"
    assert env["PET_NPROC_PER_NODE"]["value"] == "2"
    for rank in ("NODE_RANK", "RANK", "PET_NODE_RANK"):
        assert env[rank]["valueFrom"] == {"fieldRef": {"fieldPath": COMPLETION_INDEX_PATH}}
    assert set(env) >= DISTRIBUTED_ENV_NAMES
    assert "affinity" not in pod or "podAntiAffinity" not in pod["affinity"]


def test_cpu_only_distributed_job_runs_one_process_per_worker() -> None:
    spec = JobSpec(team="t", name="n", kind="training", image="i", workers=2)

    _, job = build_manifests(spec, ManifestContext(job_id=7, namespace="ns", master_port=23456))

    env = env_by_name(job["spec"]["template"]["spec"]["containers"][0])
    assert env["PET_NPROC_PER_NODE"]["value"] == "1"
    assert env["MASTER_PORT"]["value"] == "23456"


def test_portal_distributed_env_wins_over_user_env_of_the_same_name() -> None:
    spec, ctx = GOLDEN_CASES["distributed_training"]
    spec = JobSpec(**{**spec.__dict__, "env": {"MASTER_ADDR": "evil.example.com", "X": "1"}})

    _, job = build_manifests(spec, ctx)

    env = job["spec"]["template"]["spec"]["containers"][0]["env"]
    assert [item for item in env if item["name"] == "MASTER_ADDR"] == [
        {"name": "MASTER_ADDR", "value": "gpt-pretrain-303-0.gpt-pretrain-303"}
    ]
    assert [item["name"] for item in env] == sorted(item["name"] for item in env)


def test_inference_is_a_deployment_then_a_service_on_its_port() -> None:
    spec, _ = GOLDEN_CASES["mig_inference"]

    deployment, service = build("mig_inference")

    assert (deployment["apiVersion"], deployment["kind"]) == ("apps/v1", "Deployment")
    assert (service["apiVersion"], service["kind"]) == ("v1", "Service")
    assert deployment["spec"]["replicas"] == 2
    template = deployment["spec"]["template"]
    selector = deployment["spec"]["selector"]["matchLabels"]
    assert selector == {JOB_ID_LABEL: "404"}
    assert selector.items() <= template["metadata"]["labels"].items()
    assert service["spec"]["type"] == "ClusterIP"
    assert service["spec"]["selector"] == selector
    container = template["spec"]["containers"][0]
    (port,) = container["ports"]
    assert port["containerPort"] == spec.port == 8000
    (service_port,) = service["spec"]["ports"]
    assert service_port["port"] == 8000
    assert service_port["targetPort"] in (port["name"], port["containerPort"])
    assert "restartPolicy" not in template["spec"]


def test_inference_probes_give_model_loading_ten_minutes() -> None:
    container = main_container(build("mig_inference"))

    startup = container["startupProbe"]
    assert startup["httpGet"]["path"] == "/health"
    assert startup["periodSeconds"] * startup["failureThreshold"] >= 600
    for probe in ("readinessProbe", "livenessProbe"):
        assert container[probe]["httpGet"] == {"path": "/health", "port": "http"}


def test_inference_replicas_prefer_separate_nodes() -> None:
    deployment, _ = build("time_sliced_inference")

    anti = deployment["spec"]["template"]["spec"]["affinity"]["podAntiAffinity"]

    assert "requiredDuringSchedulingIgnoredDuringExecution" not in anti
    (term,) = anti["preferredDuringSchedulingIgnoredDuringExecution"]
    assert term["weight"] == 100
    assert term["podAffinityTerm"] == {
        "labelSelector": {"matchLabels": {JOB_ID_LABEL: "505"}},
        "topologyKey": "kubernetes.io/hostname",
    }


# --- rendering -------------------------------------------------------------------


def test_yaml_puts_api_version_kind_metadata_spec_first_and_has_no_aliases() -> None:
    text = to_yaml(build("distributed_training"))

    documents = text.split("---\n")[1:]
    assert len(documents) == 2
    for document in documents:
        top_level = [line.split(":")[0] for line in document.splitlines() if line[:1].isalpha()]
        assert top_level == ["apiVersion", "kind", "metadata", "spec"]
    assert "&id" not in text and "*id" not in text


@pytest.mark.parametrize(
    ("quantity", "value"),
    [("16Gi", 16 * 2**30), ("500m", 0.5), ("2", 2), ("1e3", 1000), ("1.5G", 1.5e9), ("1E", 1e18)],
)
def test_parse_quantity(quantity: str, value: float) -> None:
    assert float(parse_quantity(quantity)) == value


def test_parse_quantity_refuses_garbage() -> None:
    with pytest.raises(ValueError):
        parse_quantity("sixteen gigs")


# --- PyTorchJob (launcher pytorchjob) ------------------------------------------------------


@pytest.fixture(scope="module")
def upstream_crds() -> Path:
    """The operators' own CRDs, from their Go modules (``localcluster/build.sh``: cached)."""
    return build_components() / "crds"


def test_the_pytorchjob_is_valid_against_the_operators_crd_schema(upstream_crds: Path) -> None:
    # Given the CRD the training operator installs
    crd = yaml.safe_load((upstream_crds / "kubeflow.org_pytorchjobs.yaml").read_text())
    schema = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    # Then the portal's PyTorchJob satisfies it, and its replicas' pod templates
    # Kubernetes' own PodTemplate schema (validate_manifests)
    (manifest,) = build("pytorchjob_training")
    jsonschema.validate(manifest, schema)
    assert validate_manifests([manifest], K8S_VERSION) == []
    replicas = manifest["spec"]["pytorchReplicaSpecs"]
    assert (replicas["Master"]["replicas"], replicas["Worker"]["replicas"]) == (1, 2)
    assert replicas["Worker"]["template"] == replicas["Master"]["template"]
    assert replicas["Worker"]["template"]["spec"]["containers"][0]["name"] == "pytorch"


def test_a_broken_pytorchjob_is_reported_field_by_field() -> None:
    (manifest,) = build("pytorchjob_training")
    manifest["spec"]["bogus"] = 1
    manifest["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"] = 0
    pod = manifest["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]
    pod["containers"][0]["name"] = "main"
    pod["containers"][0]["ports"] = [{"name": "x"}]  # containerPort is required
    errors = validate_manifests([manifest], K8S_VERSION)
    assert any("spec.bogus: unknown field" in e for e in errors), errors
    assert any("Worker.replicas: must be an integer of at least 1" in e for e in errors)
    assert any("needs a container named pytorch" in e for e in errors)
    assert any("PyTorchJob Master" in e and "containerPort" in e for e in errors), errors


# --- TrainJob (launcher trainjob) -----------------------------------------------------------


def test_the_trainjob_is_valid_against_trainers_crd_schema_and_types(upstream_crds: Path) -> None:
    # Given the TrainJob CRD Kubeflow Trainer installs
    crd = yaml.safe_load((upstream_crds / "trainer.kubeflow.org_trainjobs.yaml").read_text())
    schema = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    # Then the portal's TrainJob satisfies it and Trainer's published types, and the
    # trainer's pods Kubernetes' own PodTemplate schema
    (manifest,) = build("trainjob_training")
    jsonschema.validate(manifest, schema)
    assert validate_manifests([manifest], K8S_VERSION) == []
    spec = manifest["spec"]
    assert spec["runtimeRef"] == {
        "name": "gpu-portal-torch",
        "kind": "ClusterTrainingRuntime",
        "apiGroup": "trainer.kubeflow.org",
    }
    assert (spec["trainer"]["numNodes"], spec["activeDeadlineSeconds"]) == (2, 7200)
    assert spec["trainer"]["resourcesPerNode"]["limits"]["nvidia.com/gpu"] == "2"
    # torchrun's env is Trainer's to set: the portal sets none of it
    assert not {e["name"] for e in spec["trainer"]["env"]} & DISTRIBUTED_ENV_NAMES


def test_the_trainjobs_pods_get_the_portals_labels_placement_and_restricted_context() -> None:
    (manifest,) = build("trainjob_training")
    (patch,) = manifest["spec"]["runtimePatches"]
    assert patch["manager"] == "gpu-portal.dev/manager"
    (node,) = patch["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"]
    pod = node["template"]["spec"]["template"]
    assert node["name"] == "node"
    assert pod["metadata"]["labels"]["gpu-portal.dev/job-id"] == "505"
    assert pod["spec"]["securityContext"]["runAsNonRoot"] is True
    assert {t["key"] for t in pod["spec"]["tolerations"]} >= {"nvidia.com/gpu"}
    assert "nodeAffinity" in pod["spec"]["affinity"]
    (container,) = pod["spec"]["containers"]
    assert container["name"] == "node"
    assert container["securityContext"]["allowPrivilegeEscalation"] is False
    assert container["securityContext"]["capabilities"] == {"drop": ["ALL"]}
    assert {m["mountPath"] for m in container["volumeMounts"]} >= {"/dev/shm"}


def test_a_broken_trainjob_is_reported_field_by_field() -> None:
    # A field of the wrong type (Trainer's types say which)
    (manifest,) = build("trainjob_training")
    manifest["spec"]["trainer"]["numNodes"] = "two"
    errors = validate_manifests([manifest], K8S_VERSION)
    assert any("numNodes" in e and "integer" in e for e in errors), errors
    # A field Trainer does not know (its API server would drop it)
    (manifest,) = build("trainjob_training")
    manifest["spec"]["bogus"] = 1
    errors = validate_manifests([manifest], K8S_VERSION)
    assert any("spec.bogus: unknown field" in e for e in errors), errors
    # A pod field of the wrong type, in the runtime patch
    (manifest,) = build("trainjob_training")
    pod = manifest["spec"]["runtimePatches"][0]["trainingRuntimeSpec"]["template"]["spec"][
        "replicatedJobs"][0]["template"]["spec"]["template"]["spec"]  # fmt: skip
    pod["volumes"].append({"name": "scratch", "emptyDir": {"medium": 7}})
    errors = validate_manifests([manifest], K8S_VERSION)
    assert any("medium" in e and "string" in e for e in errors), errors
