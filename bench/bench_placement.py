"""Placing a job with ``cluster: any``: the decision's time with 1, 2 and 10 registered clusters.

    .venv/bin/python -m bench placement        # or: make bench NAME=placement

What it measures: ``job_preview`` of a one-GPU training job with ``cluster: any`` (the spec
checked, its manifests built and validated, then placement: each cluster taking work asked
the fit preview's question, ``jobs.services.placement``), with 1, 2 and 10 registered
clusters. The clusters are one real local cluster (the ``large`` profile's 540 nodes run by
KWOK) registered under 10 names: each name has its own API client and its own cluster
snapshot, so each is listed and asked as a separate cluster would be (what differs from 10
real clusters: one API server answers them all). Two cases per count:

- *fresh*: every snapshot listed anew (``FIT_SNAPSHOT_TTL_SECONDS=0``: nodes and pods of
  every cluster at each decision);
- *cached*: the snapshots within their TTL (the default 10 s), as when people submit within
  seconds of each other.

The first cluster (by name) where the job fits now on nominal quota ends the asking: the
rows above are that best case. *Every one asked*: vision's nominal quota held by a running
job's row, so the job fits only on quota robotics lends, in every cluster alike, and every
cluster is asked. The baseline is one cluster asked once (``job_preview`` asks it even
alone, for its answer).
"""

from __future__ import annotations

import argparse
import io
import tempfile
from pathlib import Path
from typing import Any

from bench.harness import django_setup, sample, start

COUNTS = (2, 10)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=15)
    args = parser.parse_args()
    django_setup("gpu_portal_bench_placement", redis_db=8)

    from django.conf import settings
    from django.contrib.auth.models import User
    from django.core.management import call_command

    from cluster import kube
    from cluster.models import Cluster
    from jobs.services.submit import job_preview
    from tests.sandbox_process import SandboxProcess

    report = start(
        "placement",
        "Placing a job with cluster: any, against 1, 2 and 10 registered clusters",
        counts=[1, *COUNTS],
        repeat=args.repeat,
        nodes="large profile, KWOK",
    )
    call_command("seed_demo", stdout=io.StringIO())
    alice = User.objects.get(username="alice")
    spec: dict[str, Any] = {
        "team": "vision", "name": "placed", "kind": "training", "cluster": "any",
        "image": "nvcr.io/nvidia/pytorch:24.05-py3", "command": ["python", "train.py"],
        "gpu": {"count": 1},
    }  # fmt: skip
    with tempfile.TemporaryDirectory(prefix="bench-placement-") as tmp:
        proc = SandboxProcess(Path(tmp) / "cluster", "large", 60.0, ("--nodes", "kwok")).start()
        try:
            settings.KUBECONFIG, settings.KUBE_CONTEXT = str(proc.kubeconfig), ""
            kube.reset_client()
            call_command("cluster_sync", stdout=io.StringIO())

            def place() -> None:
                preview = job_preview(user=alice, data=spec)
                assert preview.fit is not None and preview.fit.verdict == "fits", preview.fit

            def case(name: str, baseline: str | None, ttl: int) -> None:
                settings.FIT_SNAPSHOT_TTL_SECONDS = ttl
                report.row(name, sample(place, args.repeat, warmup=2), baseline=baseline)

            def clusters(count: int) -> None:
                for index in range(Cluster.objects.count(), count):
                    Cluster.objects.create(
                        name=f"gpu-{index}", kubeconfig_path=str(proc.kubeconfig)
                    )

            case("1 cluster (asked once)", None, 0)
            # The first cluster (by name) where it fits now on nominal quota ends the asking.
            for count in COUNTS:
                clusters(count)
                case(f"{count} clusters, fresh", "1 cluster (asked once)", 0)
                case(f"{count} clusters, cached", "1 cluster (asked once)", 10)
            # Every cluster asked: vision's nominal quota held (a running job's row), so the
            # job fits on quota robotics lends, in every cluster, and none ends the asking.
            Cluster.objects.exclude(name=settings.CLUSTER_NAME).delete()
            _hold_quota(alice)
            for count in COUNTS:
                clusters(count)
                case(f"{count} clusters, every one asked, fresh", "1 cluster (asked once)", 0)
                case(f"{count} clusters, every one asked, cached", "1 cluster (asked once)", 10)
        finally:
            proc.stop()
    small = report.find("2 clusters, every one asked, fresh")
    large = report.find("10 clusters, every one asked, fresh")
    report.growth(
        "a fresh decision's time, every cluster asked",
        2,
        10,
        small.metrics["median_ms"],
        large.metrics["median_ms"],
    )
    report.note(
        "Each cluster's answer is a fit preview on its own snapshot; the clusters are asked "
        "one after another."
    )
    report.finish()


def _hold_quota(owner: Any) -> None:
    """A running job of vision's holding its 16 GPUs (a row: admission counts rows)."""
    from django.utils import timezone

    from jobs.models import Job, JobState
    from teams.models import Team

    vision = Team.objects.get(slug="vision")
    now = timezone.now()
    Job.objects.create(
        team=vision, owner=owner, name="holder", kind="training", state=JobState.RUNNING,
        spec={}, demand={"nvidia.com/gpu": 16}, gpu_count=16, namespace=vision.namespace,
        admitted_at=now, applied_at=now, started_at=now,
    )  # fmt: skip


if __name__ == "__main__":
    main()
