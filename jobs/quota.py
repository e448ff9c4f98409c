"""What a job holds against its team's quotas (pure functions, no database).

A job's *demand* maps quota resources to amounts in base units: GPUs, MIG
slices and shared GPUs as counts, ``cpu`` in millicores, ``memory`` in bytes.
An exclusive GPU counts against ``nvidia.com/gpu`` (any product) and, when the
job names one, against that product's quota too.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol

from jobs.spec import JobSpec
from scheduling.quantity import quota_base, quota_words
from scheduling.resources import ANY_GPU, CPU, MEMORY, MIG_PREFIX, SHARED_GPU


class BorrowSettings(Protocol):
    inference_may_borrow: bool
    workspace_may_borrow: bool


def kind_may_borrow(team: BorrowSettings, kind: str) -> bool:
    """Whether a job of ``kind`` may run on quota its cohort lends (and so be reclaimed):
    training always; inference and workspaces only where the team allows it (an
    interactive session or a service should not be cut off by a reclaim)."""
    if kind == "inference":
        return team.inference_may_borrow
    if kind == "workspace":
        return team.workspace_may_borrow
    return True


def gpu_quota_keys(spec: JobSpec) -> tuple[str, ...]:
    """The quota resources that may cover this job's GPUs (any one of them is enough)."""
    gpu = spec.gpu
    if gpu.count == 0:
        return ()
    if gpu.sharing == "mig":
        return (f"{MIG_PREFIX}{gpu.mig_profile}",)
    if gpu.sharing == "shared":
        return (SHARED_GPU,)
    return (ANY_GPU, gpu.product) if gpu.product else (ANY_GPU,)


def job_demand(spec: JobSpec, *, cpu_millis: int, memory_bytes: int) -> dict[str, int]:
    """Resources the whole job (all workers or replicas) holds while admitted."""
    pods = spec.pod_count
    demand = dict.fromkeys(gpu_quota_keys(spec), spec.gpu.count * pods)
    demand[CPU] = cpu_millis * pods
    demand[MEMORY] = memory_bytes * pods
    return demand


@dataclass(frozen=True)
class QuotaProblem:
    resource: str
    message: str


def quota_never_fits(
    spec: JobSpec,
    demand: Mapping[str, int],
    limits: Mapping[str, int],
    *,
    team: str,
    ceilings: Mapping[str, int] | None = None,
    cohort: str | None = None,
) -> QuotaProblem | None:
    """Why this job could never be admitted under these limits, or None.

    1. Its GPUs must be covered by at least one quota (a team without any
       quota for a kind of GPU may not use it).
    2. Every demanded resource that has a quota must fit inside what the team could ever
       hold: its nominal quota (``limits``) or, in a cohort, its ``ceilings`` (nominal
       plus what it may borrow).
    """
    keys = gpu_quota_keys(spec)
    if keys and not any(key in limits for key in keys):
        offered = sorted(r for r in limits if r not in (CPU, MEMORY))
        hint = f" The team has quota for: {', '.join(offered)}." if offered else ""
        what = {
            ANY_GPU: "GPUs of any product (nvidia.com/gpu)",
            SHARED_GPU: "time-sliced GPUs (nvidia.com/gpu.shared)",
        }.get(keys[0], keys[0])
        if spec.gpu.product:
            what = f"{spec.gpu.product} GPUs"
        return QuotaProblem(
            keys[0],
            f"Team {team} has no quota for {what}.{hint} Choose a GPU the team has quota for, "
            "or ask a platform admin for quota.",
        )
    ceilings = ceilings or limits
    for resource, amount in demand.items():
        if resource not in limits:
            continue
        capacity = quota_base(resource, ceilings.get(resource, limits[resource]))
        if amount > capacity:
            per_pod = amount // max(spec.pod_count, 1)
            pods = (
                f" ({quota_words(resource, per_pod)} × {spec.pod_count} pods)"
                if spec.pod_count > 1
                else ""
            )
            extra = capacity - quota_base(resource, limits[resource])
            if extra > 0 and cohort:
                nominal = quota_words(resource, quota_base(resource, limits[resource]))
                return QuotaProblem(
                    resource,
                    f"Team {team} can hold at most {quota_words(resource, capacity)} of "
                    f"{resource} ({nominal} nominal and {quota_words(resource, extra)} it may "
                    f"borrow in cohort {cohort}); this job asks for "
                    f"{quota_words(resource, amount)}{pods}, so it could never be admitted. "
                    "Ask for less, or ask a platform admin for more quota.",
                )
            return QuotaProblem(
                resource,
                f"Team {team}'s quota allows at most {quota_words(resource, capacity)} of "
                f"{resource}; this job asks for {quota_words(resource, amount)}{pods}, so it "
                "could never be admitted. Ask for less, or ask a platform admin for more quota.",
            )
    return None
