"""When GPUs and nodes fail under training jobs: how soon the portal notices, how soon the job
runs again, and what a failure costs with and without checkpoints (a soak run).

    .venv/bin/python bench/bench_failures.py [--jobs 200] [--minutes 5] [--gpu-rate 1.0]

The cluster is the sandbox with its ``large`` profile (4,000 GPUs) at speed 1 (wall time, as
the portal's own intervals are), plus a ``faults`` section: GPUs held by pods fail at
``--gpu-rate`` XID errors per GPU-hour and busy nodes stop at ``--node-rate`` per node-hour
(``sandbox.nodes.faultplan``, seeded). The portal runs as in production: a Celery
worker with beat (the GPU-failure check every 30 s by default), the watch tracker, and a
Prometheus scraping the exporter every 10 s. The benchmark submits ``--jobs`` training jobs
of 1-8 GPUs running ``--minutes`` each, half of them with a checkpoint volume (the synthetic
trainer saves every 20 steps: 100 s), and waits until every job has ended.

For each fault that struck a portal job (the sandbox's fault log names the pods):

1. fault → detection: the job's ``GPUFailure`` / ``NodeFailure`` timeline entry;
2. fault → resumed: its next move to ``running`` (p50, p95);
3. GPU-hours lost per failure, with and without a checkpoint;
4. the cost to the job: the progress lost since its last checkpoint plus the time until
   it runs again, against the goal of one checkpoint interval plus one minute.

The soak's own checks: no job lost (each ends succeeded, or failed after its hardware
retries), none retried more than ``GPU_FAILURE_RETRIES`` times. The baseline row is the
fault-free part: how long a job takes from submission to running on the same cluster.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import sys
import tempfile
import time
import urllib.request
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.harness import REPO_ROOT, django_setup, start

DATABASE = "gpu_portal_bench_failures"
REDIS_DB = 7
CHECKPOINT_INTERVAL_S = 100.0  # 20 steps of 5 s: the sandbox trainer's (sandbox/logs.py)
RECOVERY_GOAL_S = 60.0
NODE_MONITOR_GRACE_S = 50.0  # kube-controller-manager's node-monitor-grace-period
SIZES = (1, 2, 4, 8)
PRODUCT = "NVIDIA-A100-SXM4-80GB"


def soak_profile(workdir: Path, gpu_rate: float, node_rate: float, seed_hours: float) -> Path:
    """``large`` with a fault rate: the profile a soak run uses."""
    profile = yaml.safe_load((REPO_ROOT / "sandbox" / "profiles" / "large.yaml").read_text())
    profile["name"] = "large-soak"
    profile["faults"] = {
        "gpuFailuresPerGpuHour": gpu_rate,
        "nodeFailuresPerNodeHour": node_rate,
        "busyOnly": True,
        "repairAfter": f"{int(seed_hours * 60)}m",
        "nodeDownFor": "10m",
    }
    path = workdir / "large-soak.yaml"
    path.write_text(yaml.safe_dump(profile, sort_keys=False))
    return path


def portal_env(kubeconfig: Path, prometheus_url: str) -> dict[str, str]:
    return {
        **os.environ,
        "DATABASE_URL": os.environ["DATABASE_URL"],
        "REDIS_URL": os.environ["REDIS_URL"],
        "KUBECONFIG": str(kubeconfig),
        "KUBE_REQUEST_TIMEOUT": "30",
        "PROMETHEUS_URL": prometheus_url,
        # Beat's other periodic work stays out of the way of what is measured.
        "IDLE_POLICY_INTERVAL_SECONDS": "3600",
        "ACCOUNTING_INTERVAL_SECONDS": "3600",
        "PORTAL_ENV": "development",
        "DEBUG": "false",
    }


def submit(jobs: int, minutes: float) -> list[int]:
    from django.contrib.auth import get_user_model
    from django.core.management import call_command

    from jobs.services.submit import job_submit
    from teams.cluster_sync import team_cluster_sync
    from teams.models import Team
    from teams.services import quota_set

    call_command("seed_demo", verbosity=0)
    teams = list(Team.objects.order_by("slug"))
    for team in teams:
        for resource in ("nvidia.com/gpu", PRODUCT):  # the demo teams' product quotas too
            quota_set(actor=None, team=team, resource=resource, limit=10_000)
        team_cluster_sync(team_id=team.pk)  # namespaces and quotas before any job applies
    admin = get_user_model().objects.get(username="admin")
    ids = []
    for i in range(jobs):
        data: dict[str, Any] = {
            "team": teams[i % len(teams)].slug,
            "name": f"soak-{i}",
            "kind": "training",
            "image": "nvcr.io/nvidia/pytorch:24.05-py3",
            "command": ["torchrun", "train.py"],
            "env": {"SANDBOX_DURATION": f"{int(minutes * 60)}s"},
            "gpu": {"count": SIZES[i % len(SIZES)], "product": PRODUCT},
        }
        if i % 2 == 0:
            data["checkpoint"] = {"claim": f"ckpt-soak-{i}", "mount_path": "/checkpoints"}
        ids.append(job_submit(user=admin, data=data).pk)
    return ids


def fault_log(sandbox: Any) -> list[dict[str, Any]]:
    request = urllib.request.Request(
        f"http://127.0.0.1:{sandbox.metrics_port}/sandbox/faults/log",
        headers={"Authorization": f"Bearer {sandbox.token}"},
    )
    with urllib.request.urlopen(request, timeout=30) as resp:  # noqa: S310 - as above
        return list(json.load(resp))


def percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def figures(values: list[float]) -> dict[str, Any]:
    return {
        "n": len(values),
        "p50_s": round(percentile(values, 0.5), 1),
        "p95_s": round(percentile(values, 0.95), 1),
        "max_s": round(max(values), 1) if values else float("nan"),
    }


def measure(ids: list[int], log: list[dict[str, Any]]) -> dict[str, Any]:
    """Join the sandbox's fault log to the jobs' timelines (see the module's docstring)."""
    from django.utils import timezone

    from jobs.models import Job, JobEvent

    jobs = {j.pk: j for j in Job.objects.filter(pk__in=ids)}
    # A single-worker Job's pods are "<object name>-<5 characters>".
    by_object = {(j.namespace, j.object_name): j.pk for j in jobs.values()}

    def job_of(pod: str) -> int | None:
        namespace, _, name = pod.partition("/")
        return by_object.get((namespace, name.rsplit("-", 1)[0]))

    rows: dict[str, list[dict[str, Any]]] = {"gpu": [], "node": []}
    for entry in log:
        if entry.get("repair") or entry.get("down") is False:
            continue
        kind = "node" if entry.get("down") else "gpu"
        hit = {j for j in map(job_of, entry.get("pods") or []) if j is not None}
        at = datetime.fromtimestamp(entry["at"], tz=timezone.get_current_timezone())
        for job_id in sorted(hit):
            timeline = list(
                JobEvent.objects.filter(job_id=job_id, created_at__gte=at).order_by("pk")
            )
            failure = next((e for e in timeline if e.reason in ("GPUFailure", "NodeFailure")), None)
            resumed = next(
                (
                    e
                    for e in timeline
                    if failure is not None
                    and e.pk > failure.pk
                    and e.message.startswith("pending → running")
                ),
                None,
            )
            rows[kind].append(
                {
                    "job": job_id,
                    "gpus": jobs[job_id].gpu_count,
                    "checkpoint": bool(jobs[job_id].spec.get("checkpoint")),
                    "detected_s": (failure.created_at - at).total_seconds() if failure else None,
                    "resumed_s": (resumed.created_at - at).total_seconds() if resumed else None,
                    "lost_gpu_h": _lost_from(failure.message) if failure else None,
                }
            )
    return {"rows": rows, "jobs": jobs}


def _lost_from(message: str) -> float | None:
    """The GPU-hours the failure cost, as its explanation says them."""
    found = re.search(r"(?:About|At most) ([0-9.]+) GPU-hours were lost", message)
    return float(found.group(1)) if found else None


def wait_until_done(ids: list[int], timeout: float) -> float:
    from django.conf import settings
    from django.utils import timezone

    from jobs.models import Job, JobState

    started = time.monotonic()
    final = (JobState.SUCCEEDED, JobState.FAILED, JobState.CANCELLED)
    while time.monotonic() - started < timeout:
        left = Job.objects.filter(pk__in=ids).exclude(state__in=final).count()
        if not left:
            break
        print(f"     {left} jobs not done ({time.monotonic() - started:.0f} s)", flush=True)
        time.sleep(20)
    # A job that failed last is explained at the GPU-failure check's next run: wait for the
    # checks to be done with every recent failure before measuring.
    settle = timedelta(seconds=settings.GPU_FAILURE_CHECK_INTERVAL_SECONDS + 120)
    while time.monotonic() - started < timeout and (
        Job.objects.filter(
            pk__in=ids, state=JobState.FAILED, finished_at__gte=timezone.now() - settle
        )
        .exclude(reason__in=("GPUFailure", "NodeFailure"))
        .exists()
    ):
        time.sleep(5)
    return time.monotonic() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=200)
    parser.add_argument("--minutes", type=float, default=5.0, help="each job's run time")
    parser.add_argument("--gpu-rate", type=float, default=1.0, help="XIDs per busy GPU-hour")
    parser.add_argument("--node-rate", type=float, default=0.3, help="stops per busy node-hour")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    django_setup(DATABASE, redis_db=REDIS_DB)
    import redis
    from django.conf import settings

    from cluster import kube
    from jobs.models import JobState
    from tests.monitoring.prometheus_process import PrometheusProcess
    from tests.processes import spawn, terminate
    from tests.sandbox_process import SandboxProcess
    from tests.worker_process import WorkerProcess

    redis.Redis.from_url(os.environ["REDIS_URL"]).flushdb()
    report = start(
        "failures",
        "GPU and node failures under training jobs: detection, recovery, GPU-hours lost",
        jobs=args.jobs,
        minutes=args.minutes,
        gpu_rate_per_gpu_hour=args.gpu_rate,
        node_rate_per_node_hour=args.node_rate,
        seed=args.seed,
        profile="large (500 GPU nodes × 8 GPUs) at speed 1",
    )
    workdir = Path(tempfile.mkdtemp(prefix="bench-failures-"))
    profile = soak_profile(workdir, args.gpu_rate, args.node_rate, seed_hours=1.0)
    sandbox = SandboxProcess(workdir / "sandbox", str(profile), 1.0, ("--seed", str(args.seed)))
    sandbox.start()
    prom = PrometheusProcess(
        workdir / "prometheus", (f"127.0.0.1:{sandbox.metrics_port}",), scrape_interval="10s"
    ).start()
    settings.KUBECONFIG = str(sandbox.kubeconfig)
    settings.KUBE_CONTEXT = ""
    kube.reset_client()
    env = portal_env(sandbox.kubeconfig, prom.url)
    worker = WorkerProcess(workdir / "worker", env).start(timeout=60)
    tracker = spawn(
        [sys.executable, "manage.py", "track_cluster"],
        workdir / "tracker.log",
        env=env,
        cwd=REPO_ROOT,
    )
    try:
        ids = submit(args.jobs, args.minutes)
        print(f"  -- {len(ids)} jobs submitted; waiting for them to end", flush=True)
        took = wait_until_done(ids, timeout=args.minutes * 60 * 6 + 600)
        found = measure(ids, fault_log(sandbox))
    finally:
        terminate(tracker)
        worker.stop()
        prom.stop()
        sandbox.stop()
        shutil.rmtree(workdir, ignore_errors=True)

    jobs: dict[int, Any] = found["jobs"]
    first_runs = [
        (j.started_at - j.created_at).total_seconds()
        for j in jobs.values()
        if j.started_at and not j.gpu_failure_retries
    ]
    report.row("submitted → running (no failure)", **figures(first_runs))
    retries = int(settings.GPU_FAILURE_RETRIES)
    for kind, rows in found["rows"].items():
        if not rows:
            report.note(f"no {kind} fault struck a job in this run")
            continue
        detected = [r["detected_s"] for r in rows if r["detected_s"] is not None]
        resumed = [r["resumed_s"] for r in rows if r["resumed_s"] is not None]
        report.row(
            f"{kind} fault → detected", **figures(detected), undetected=len(rows) - len(detected)
        )
        report.row(
            f"{kind} fault → running again",
            baseline="submitted → running (no failure)",
            ratio_of="p50_s",
            **figures(resumed),
            struck=len(rows),
        )
        for kept in (True, False):
            lost = [
                r["lost_gpu_h"] / r["gpus"]
                for r in rows
                if r["checkpoint"] is kept and r["lost_gpu_h"] is not None
            ]
            per_failure = [
                r["lost_gpu_h"] for r in rows if r["checkpoint"] is kept and r["lost_gpu_h"]
            ]
            report.row(
                f"{kind} fault, {'with' if kept else 'without'} checkpoint: GPU-h lost",
                n=len(per_failure),
                gpu_h_per_failure=round(statistics.mean(per_failure), 3) if per_failure else 0,
                hours_per_gpu_p95=round(percentile(lost, 0.95), 3) if lost else 0,
            )
        costs = [
            r["lost_gpu_h"] / r["gpus"] * 3600 + r["resumed_s"]
            for r in rows
            if r["checkpoint"] and r["lost_gpu_h"] is not None and r["resumed_s"] is not None
        ]
        if costs:
            goal = CHECKPOINT_INTERVAL_S + RECOVERY_GOAL_S
            if kind == "node":
                report.note(
                    "a node failure's lost progress is an upper bound (the whole run): a dead "
                    "node's kubelet serves no logs, so its last checkpoint line cannot be read; "
                    f"detection waits for the control plane: {NODE_MONITOR_GRACE_S:.0f} s "
                    "node-monitor grace + the pods' toleration "
                    f"({settings.NODE_FAILURE_TOLERATION_SECONDS} s)"
                )
            report.goal(
                f"a {kind} failure costs a checkpointing job at most its checkpoint interval "
                f"({CHECKPOINT_INTERVAL_S:.0f} s) + 1 min",
                met=percentile(costs, 0.95) <= goal,
                value=f"p50 {percentile(costs, 0.5):.0f} s, p95 {percentile(costs, 0.95):.0f} s "
                f"(progress lost since the checkpoint + time to run again; goal {goal:.0f} s)",
            )
    states = {s: sum(1 for j in jobs.values() if j.state == s) for s in JobState.values}
    lost_jobs = [j.pk for j in jobs.values() if j.reason == "Lost" or not j.is_final]
    over = [j.pk for j in jobs.values() if j.gpu_failure_retries > retries]
    exhausted = [
        j.pk
        for j in jobs.values()
        if j.state == JobState.FAILED and j.reason not in ("GPUFailure", "NodeFailure")
    ]
    report.goal(
        "no job lost: every job ends, succeeded or failed on hardware past its retries",
        met=not lost_jobs and not exhausted,
        value=f"{states}; lost or unfinished {lost_jobs}; failed otherwise {exhausted}; "
        f"{took:.0f} s",
    )
    report.goal(
        f"every hardware failure retried at most {retries} times",
        met=not over,
        value="most retries of a job: "
        f"{max((j.gpu_failure_retries for j in jobs.values()), default=0)}",
    )
    total_lost = sum(j.gpu_hours_lost for j in jobs.values())
    report.note(f"GPU-hours lost to hardware in all: {total_lost:.2f}")
    report.finish()


if __name__ == "__main__":
    main()
