"""The ``gpuportal`` command line, installed as a console script, run as a subprocess
against a live portal (pytest-django's live server), a real Celery worker and the sandbox
cluster: what a researcher types, what they read, and the exit codes scripts rely on."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from jobs.models import Job, JobState, JobTemplate
from tests.receivers import free_port
from tests.worker_process import WorkerProcess, wait_for

pytestmark = pytest.mark.django_db(transaction=True)

GPUPORTAL = Path(sys.executable).parent / "gpuportal"
JOB = {
    "team": "vision",
    "name": "cli-train",
    "kind": "training",
    "image": "nvcr.io/nvidia/pytorch:24.05-py3",
    "command": ["torchrun", "train.py"],
    "gpu": {"count": 1, "product": "NVIDIA-A100-SXM4-80GB"},
    "env": {"SANDBOX_DURATION": "30s"},
}


def run(
    home: Path, *args: str, env: dict[str, str] | None = None, stdin: str | None = None
) -> subprocess.CompletedProcess[str]:
    environment = {
        "PATH": os.environ["PATH"],
        "HOME": str(home),
        "XDG_CONFIG_HOME": str(home / ".config"),
        "LANG": "C.UTF-8",
        **(env or {}),
    }
    return subprocess.run(
        [str(GPUPORTAL), *args],
        env=environment,
        capture_output=True,
        text=True,
        timeout=120,
        input=stdin,
        check=False,
    )


def logged_in(portal: dict[str, Any]) -> dict[str, str]:
    return {"GPU_PORTAL_URL": portal["url"], "GPU_PORTAL_TOKEN": portal["token"]}


def job_file(tmp_path: Path, **changes: Any) -> str:
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump({**JOB, **changes}))
    return str(path)


def test_login_checks_the_token_and_stores_it_for_the_owner_only(
    portal: dict[str, Any], home: Path
) -> None:
    refused = run(home, "login", "--url", portal["url"], "--token", "not-a-token")
    assert refused.returncode == 6
    assert "error: Invalid, expired or revoked API token." in refused.stderr
    assert not (home / ".config" / "gpuportal" / "config.yaml").exists()

    done = run(home, "login", "--url", portal["url"], "--token", portal["token"])

    assert done.returncode == 0, done.stderr
    assert f"Logged in to {portal['url']} as alice" in done.stdout
    config = home / ".config" / "gpuportal" / "config.yaml"
    assert stat.S_IMODE(config.stat().st_mode) == 0o600
    who = run(home, "whoami")
    assert who.returncode == 0 and who.stdout.startswith("alice (user)")
    assert "vision" in who.stdout and "member" in who.stdout


def test_a_session_submit_wait_describe_logs(
    portal: dict[str, Any], home: Path, tmp_path: Path, worker: WorkerProcess
) -> None:
    env = logged_in(portal)

    submitted = run(
        home, "submit", "-f", job_file(tmp_path, env={"SANDBOX_DURATION": "150s"}),
        "--gpus", "2", "--set", "env.SEED=7", "--wait",
        env=env,
    )  # fmt: skip

    assert submitted.returncode == 0, submitted.stderr
    job = Job.objects.get(name="cli-train")
    assert job.spec["gpu"]["count"] == 2 and job.spec["env"]["SEED"] == "7"
    assert f"job {job.pk} (cli-train) submitted to team vision: queued" in submitted.stdout
    assert "running (" in submitted.stdout and "succeeded (" in submitted.stdout
    described = run(home, "describe", str(job.pk), env=env)
    assert described.returncode == 0
    assert "State:" in described.stdout and "succeeded" in described.stdout
    assert "GPUs:" in described.stdout and "2 × NVIDIA-A100-SXM4-80GB" in described.stdout
    for reason in ("Submitted", "Admitted", "Applied", "Scheduled"):
        assert reason in described.stdout
    logs = run(home, "logs", str(job.pk), env=env)
    assert logs.returncode == 0 and "training finished" in logs.stdout
    # A job that ran again after a hardware failure says so
    Job.objects.filter(pk=job.pk).update(
        gpu_failure_retries=1, excluded_nodes=["gpu-a100-1"], gpu_hours_lost=0.5
    )
    described = run(home, "describe", str(job.pk), env=env)
    assert "restart attempt 1, avoiding gpu-a100-1, 0.50 GPU-hours lost" in described.stdout


def test_wait_exits_with_the_jobs_failure(
    portal: dict[str, Any], home: Path, tmp_path: Path, worker: WorkerProcess
) -> None:
    spec = job_file(tmp_path, env={"SANDBOX_DURATION": "30s", "SANDBOX_EXIT_CODE": "3"})

    failed = run(home, "submit", "-f", spec, "--set", "retries=0", "--wait", env=logged_in(portal))

    assert failed.returncode == 1
    job = Job.objects.get(name="cli-train")
    assert f"error: job {job.pk} failed (exit code 3)" in failed.stderr


def test_logs_follow_prints_until_the_job_ends_and_cancel_stops_one(
    portal: dict[str, Any], home: Path, tmp_path: Path, worker: WorkerProcess
) -> None:
    env = logged_in(portal)
    run(home, "submit", "-f", job_file(tmp_path, env={"SANDBOX_DURATION": "150s"}), env=env)
    job = Job.objects.get(name="cli-train")
    wait_for(lambda: Job.objects.get(pk=job.pk).state == JobState.RUNNING, timeout=40)

    followed = run(home, "logs", str(job.pk), "-f", env=env)

    assert followed.returncode == 0, followed.stderr
    lines = followed.stdout.splitlines()
    assert lines[-1].startswith("training finished")
    assert len(lines) == len(set(lines))  # no line printed twice while following
    run(home, "submit", "-f", job_file(tmp_path, name="to-cancel",
        env={"SANDBOX_DURATION": "1h"}), env=env)  # fmt: skip
    other = Job.objects.get(name="to-cancel")
    cancelled = run(home, "cancel", str(other.pk), env=env)
    assert cancelled.returncode == 0
    assert f"job {other.pk} (to-cancel) cancelled: Cancelled by alice." in cancelled.stdout
    again = run(home, "cancel", str(other.pk), env=env)
    assert again.returncode == 3 and "already cancelled" in again.stderr


def test_refused_input_is_printed_per_field_as_the_api_words_it(
    portal: dict[str, Any], home: Path, tmp_path: Path
) -> None:
    refused = run(
        home, "submit", "-f", job_file(tmp_path), "--set", "gpu.count=0.5", "--set", "colour=red",
        env=logged_in(portal),
    )  # fmt: skip

    assert refused.returncode == 3
    assert refused.stderr.startswith("error: colour: Unknown field 'colour'.")
    assert "  colour: Unknown field 'colour'." in refused.stderr
    assert not Job.objects.exists()


def test_exit_codes_tell_usage_not_found_and_unreachable_apart(
    portal: dict[str, Any], home: Path, tmp_path: Path
) -> None:
    env = logged_in(portal)

    no_spec = run(home, "submit", env=env)
    bad_set = run(home, "submit", "-f", job_file(tmp_path), "--set", "gpus", env=env)
    missing = run(home, "describe", "999999", env=env)
    unreachable = run(home, "ls", env={**env, "GPU_PORTAL_URL": f"http://127.0.0.1:{free_port()}"})
    no_token = run(home, "ls", env={"GPU_PORTAL_URL": portal["url"]})

    assert no_spec.returncode == 2 and "-f FILE" in no_spec.stderr
    assert bad_set.returncode == 2 and "use FIELD=VALUE" in bad_set.stderr
    assert missing.returncode == 4 and "error:" in missing.stderr
    assert unreachable.returncode == 5 and "Cannot reach the portal" in unreachable.stderr
    assert no_token.returncode == 6 and "Not logged in" in no_token.stderr


def test_listings_in_every_output_format(
    portal: dict[str, Any], home: Path, tmp_path: Path
) -> None:
    env = logged_in(portal)
    run(home, "submit", "-f", job_file(tmp_path), env=env)

    table = run(home, "ls", env=env)
    wide = run(home, "ls", "-o", "wide", env=env)
    as_json = json.loads(run(home, "ls", "-o", "json", env=env).stdout)
    as_yaml = yaml.safe_load(run(home, "ls", "--state", "queued", "-o", "yaml", env=env).stdout)
    none_running = run(home, "ls", "--state", "running", "-o", "json", env=env)
    quota = run(home, "quota", env=env)
    gpus = run(home, "gpus", env=env)
    launchers = run(home, "launchers", env=env)

    assert table.stdout.split()[:4] == ["ID", "NAME", "TEAM", "KIND"]
    assert "cli-train" in table.stdout and "OWNER" not in table.stdout
    assert "OWNER" in wide.stdout and "alice" in wide.stdout
    assert [j["name"] for j in as_json] == ["cli-train"] == [j["name"] for j in as_yaml]
    assert json.loads(none_running.stdout) == []
    quota_rows = [line.split() for line in quota.stdout.splitlines()]
    assert quota_rows[1][:3] == ["vision", "nvidia.com/gpu", "16"]
    a100 = next(line.split() for line in gpus.stdout.splitlines() if "A100" in line)
    assert a100[0] == "NVIDIA-A100-SXM4-80GB" and int(a100[-1]) >= int(a100[-2]) > 0
    launcher_rows = {line.split()[0]: line.split() for line in launchers.stdout.splitlines()[1:]}
    assert launcher_rows["job"][1:3] == ["(default)", "Job"]
    assert launcher_rows["pytorchjob"][1:] == ["PyTorchJob", "yes", "yes"]


def test_templates_and_clone_from_the_command_line(
    portal: dict[str, Any], home: Path, tmp_path: Path
) -> None:
    env = logged_in(portal)
    JobTemplate.objects.create(
        name="a100-base",
        owner=portal["alice"],
        spec={k: v for k, v in JOB.items() if k != "name"},
    )

    listed = run(home, "templates", env=env)
    from_template = run(home, "submit", "--template", "a100-base", "--name", "t-run", env=env)
    first = Job.objects.get(name="t-run")
    cloned = run(home, "clone", str(first.pk), "--set", "gpu.count=4", "--name", "t-run-4", env=env)

    assert "a100-base" in listed.stdout
    assert from_template.returncode == 0, from_template.stderr
    assert first.spec["gpu"]["product"] == "NVIDIA-A100-SXM4-80GB"
    assert cloned.returncode == 0, cloned.stderr
    clone = Job.objects.get(name="t-run-4")
    assert clone.spec["gpu"]["count"] == 4 and clone.spec["image"] == first.spec["image"]
    preview = run(home, "preview", "--template", "a100-base", "--name", "p", env=env)
    assert preview.returncode == 0
    assert "kind: Job" in preview.stdout and "# Will it fit?" in preview.stdout


def test_every_command_has_help_with_examples(home: Path) -> None:
    commands = [
        "login", "whoami", "submit", "preview", "ls", "describe", "logs", "cancel", "clone",
        "quota", "gpus", "templates", "launchers",
    ]  # fmt: skip
    for command in commands:
        result = run(home, command, "--help")
        assert result.returncode == 0, command
        assert "Example" in result.stdout, command
        assert f"gpuportal {command}" in result.stdout, command
