"""Workspaces stopped when idle by both signals, never on a guess (docs/workspaces.md): a real
JupyterLab in the sandbox, its GPU's utilisation through a real Prometheus, a real worker.

- idle by both signals → warned (timeline, notification) → stopped after the grace period,
  home folder kept;
- a kernel busy with a loop (its GPU busy) is never stopped however long nobody types;
- a notebook at 0 % GPU whose user is working is never stopped;
- Prometheus down, or the server's API unreachable → nothing stopped;
- the maximum lifetime is enforced with the same warning, busy or not.
"""

from __future__ import annotations

import html
import json
import os
import signal
import subprocess
import time
import urllib.request
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import websocket
from django.contrib.auth.models import User
from django.test import Client
from django.utils import timezone

from cluster import kube
from jobs.models import Job, JobState
from jobs.selectors.workspace_access import workspace_token
from jobs.services.submit import job_submit
from monitoring import prometheus
from monitoring.accounting import usage_rollup_day
from monitoring.models import GpuUsageDay
from monitoring.services import workspace_idle_run
from notifications.models import Delivery
from teams.models import Team
from tests.conftest import workspace_spec
from tests.monitoring.prometheus_process import PrometheusProcess
from tests.receivers import free_port
from tests.worker_process import wait_for
from workspaces.proxy.access import code_server_session
from workspaces.selectors import workspace_endpoint

pytestmark = pytest.mark.django_db(transaction=True)

# Every run of the rule is a few seconds apart; these make "idle" take seconds, not hours.
QUIET_MINUTES = 0.1  # 6 s without activity
GRACE_MINUTES = 0.1


@pytest.fixture
def quick(users: dict[str, User], metrics: PrometheusProcess, settings: Any) -> dict[str, User]:
    """Vision stops workspaces idle by both signals for 6 s, 6 s after warning."""
    settings.IDLE_GPU_WINDOW_MINUTES = 0.1
    Team.objects.filter(slug="vision").update(
        workspace_idle=Team.WorkspaceIdle.BOTH,
        workspace_idle_minutes=QUIET_MINUTES,
        workspace_grace_minutes=GRACE_MINUTES,
        workspace_max_hours=None,
        cohort=None,
    )
    return users


def fresh(job: Job) -> Job:
    return Job.objects.get(pk=job.pk)


def running_workspace(user: User, name: str) -> Job:
    job = job_submit(user=user, data=workspace_spec(name=name))
    return wait_for(
        lambda: (j := fresh(job)).state == JobState.RUNNING and workspace_endpoint(job=j) and j,
        timeout=90,
    )


def base_url(job: Job) -> str:
    endpoint = workspace_endpoint(job=job)
    assert endpoint is not None
    return endpoint.url(f"/workspaces/{job.pk}")


def call(job: Job, path: str, method: str = "GET", body: Any = None) -> Any:
    request = urllib.request.Request(
        base_url(job) + path,
        data=None if body is None else json.dumps(body).encode(),
        method=method,
        headers={"Authorization": f"token {workspace_token(job)}"},
    )
    with urllib.request.urlopen(request, timeout=10) as response:
        return json.load(response)


def why_column(user: User, job: Job) -> str:
    """The text of the workspace's "why" cell in the list at /workspaces/, as ``user``
    sees it."""
    browser = Client()
    browser.force_login(user)
    page = browser.get("/workspaces/").content.decode()
    row = page.split(f'data-testid="workspace-{job.name}"', 1)[1].split("</tr>", 1)[0]
    return html.unescape(row.split('<td class="reason">', 1)[1].split("</td>", 1)[0])


def never_acted_on(job: Job, seconds: float, between: Any = None) -> None:
    """Run the rule for ``seconds`` (past warning and grace); the workspace is never warned
    nor stopped. ``between`` runs before each pass (a user at work)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if between is not None:
            between()
        run = workspace_idle_run()
        assert job.pk not in run.warned + run.stopped
        time.sleep(1)
    found = fresh(job)
    assert found.state == JobState.RUNNING and found.idle_warned_at is None


def test_a_workspace_idle_by_both_signals_is_warned_then_stopped_with_its_home_kept(
    quick: dict[str, User],
) -> None:
    # Given alice's workspace, nobody working in it and its GPU idle
    job = running_workspace(quick["alice"], "quiet")
    # When the rule finds it idle by both signals
    wait_for(lambda: job.pk in workspace_idle_run().warned, timeout=60, interval=1)
    warned = fresh(job)
    # Then alice is warned, in words, with the time it stops (and by email)
    entry = warned.events.get(reason="WorkspaceIdle")
    assert f"Team vision stops this workspace at {warned.idle_action_due:%H:%M} UTC" in (
        entry.message
    )
    assert "no activity in its server" in entry.message and "its GPUs under" in entry.message
    wait_for(lambda: Delivery.objects.filter(event="workspace.idle").exists(), timeout=20)
    # ...and still idle after the grace period, it is stopped: its pod goes, its quota is
    # free, its home folder stays
    wait_for(lambda: job.pk in workspace_idle_run().stopped, timeout=40, interval=1)
    stopped = wait_for(lambda: (j := fresh(job)).state == JobState.STOPPED and j, timeout=60)
    assert stopped.events.filter(reason="IdleStopped").count() == 1
    # ...and the job says why, where people look: its reason and message, and the list's
    # "why" column
    assert stopped.reason == "IdleStopped"
    assert stopped.message.startswith("Stopped for being idle, by team vision's idle rule")
    assert "the home folder is kept" in stopped.message
    assert "Stopped for being idle" in why_column(quick["alice"], job)
    assert stopped.admitted_at is None and len(stopped.earlier_runs) == 1
    assert kube.get("PersistentVolumeClaim", "home-alice", job.namespace)
    # ...and the GPU-hour report counts the run it had, the GPU it held idle
    usage_rollup_day(day=timezone.localdate())
    (row,) = GpuUsageDay.objects.filter(job=job)
    assert row.gpu_hours_allocated > 0 and row.product == "shared:Tesla-T4"


def test_code_server_is_idle_by_its_heartbeat_and_its_users_request_stops_the_countdown(
    quick: dict[str, User],
) -> None:
    # Given alice's code-server workspace that nobody has opened, its GPU idle
    job = job_submit(
        user=quick["alice"], data=workspace_spec(name="vscode", workspace_image="code-server")
    )
    job = wait_for(
        lambda: (j := fresh(job)).state == JobState.RUNNING and workspace_endpoint(job=j) and j,
        timeout=90,
    )
    # When the rule runs, Then its heartbeat says nobody works in it: it is warned
    wait_for(lambda: job.pk in workspace_idle_run().warned, timeout=60, interval=1)
    assert "no activity in its server" in fresh(job).events.get(reason="WorkspaceIdle").message
    # When alice opens it before it stops (a request, signed in as the proxy signs in)
    endpoint = workspace_endpoint(job=job)
    assert endpoint is not None
    request = urllib.request.Request(
        endpoint.url("/"),
        headers={"Cookie": f"code-server-session={code_server_session(workspace_token(job))}"},
    )
    with urllib.request.urlopen(request, timeout=20) as response:
        assert "vscode-workbench" in response.read().decode()
    # Then its heartbeat is activity: the countdown stops, and it runs on
    wait_for(lambda: job.pk in workspace_idle_run().cleared, timeout=20, interval=1)
    found = fresh(job)
    assert found.state == JobState.RUNNING and found.idle_warned_at is None


def test_a_kernel_busy_with_a_loop_is_never_stopped_however_long_nobody_types(
    quick: dict[str, User],
) -> None:
    # Given a workspace whose kernel runs a long loop (its GPU busy while it does)
    job = running_workspace(quick["alice"], "looping")
    kernel = call(job, "/api/kernels", "POST", {})["id"]
    session = uuid.uuid4().hex
    ws = websocket.create_connection(
        base_url(job).replace("http", "ws", 1)
        + f"/api/kernels/{kernel}/channels?session_id={session}",
        header=[f"Authorization: token {workspace_token(job)}"],
        timeout=30,
    )
    ws.send(json.dumps({
        "header": {"msg_id": uuid.uuid4().hex, "msg_type": "execute_request", "username": "",
                   "session": session, "date": "", "version": "5.3"},
        "parent_header": {}, "metadata": {}, "channel": "shell",
        "content": {"code": "import time\nend = time.time() + 600\nwhile time.time() < end: pass",
                    "silent": False, "store_history": False, "user_expressions": {},
                    "allow_stdin": False, "stop_on_error": True},
    }))  # fmt: skip
    try:
        wait_for(lambda: call(job, "/api/kernels")[0]["execution_state"] == "busy", timeout=20)
        # When nobody touches it for many times the idle minutes and the grace period
        # Then it is never warned nor stopped
        never_acted_on(job, seconds=16)
    finally:
        ws.close()


def test_a_notebook_at_zero_gpu_whose_user_is_working_is_never_stopped(
    quick: dict[str, User],
) -> None:
    # Given a workspace whose GPU stays idle while alice edits and saves a notebook
    job = running_workspace(quick["alice"], "reading")
    saves = iter(range(1000))

    def save() -> None:
        call(
            job,
            "/api/contents/results.txt",
            "PUT",
            {"type": "file", "format": "text", "content": f"notes {next(saves)}"},
        )

    # When the rule runs for many times the idle minutes, Then it is never acted on
    never_acted_on(job, seconds=16, between=save)


def test_nothing_is_stopped_while_prometheus_is_down(quick: dict[str, User], settings: Any) -> None:
    # Given a quiet workspace, and a Prometheus that does not answer
    job = running_workspace(quick["alice"], "unmeasured")
    settings.PROMETHEUS_URL = f"http://127.0.0.1:{free_port()}"
    prometheus.reset_client()
    # When the rule runs long past the idle minutes, Then it decides nothing
    never_acted_on(job, seconds=16)


def jupyter_process(job: Job) -> int:
    """The pid of the workspace's jupyter-lab (the sandbox runs it as a local process)."""
    endpoint = workspace_endpoint(job=job)
    assert endpoint is not None
    found = subprocess.run(
        ["pgrep", "-f", "--", f"--ServerApp.ip={endpoint.ip} "],
        capture_output=True,
        text=True,
        check=False,
    ).stdout.split()
    assert found, "no jupyter-lab process for the workspace"
    return int(found[0])


@pytest.fixture
def frozen(quick: dict[str, User]) -> Iterator[Job]:
    """A quiet workspace whose server hangs (SIGSTOP): its API does not answer."""
    job = running_workspace(quick["alice"], "hung")
    pid = jupyter_process(job)
    os.kill(pid, signal.SIGSTOP)
    yield job
    os.kill(pid, signal.SIGCONT)


def test_nothing_is_stopped_while_the_servers_api_does_not_answer(frozen: Job) -> None:
    never_acted_on(frozen, seconds=16)


def test_the_maximum_lifetime_is_enforced_busy_or_not(
    quick: dict[str, User],
) -> None:
    # Given a team whose workspaces may run 36 s, and one that is in use
    Team.objects.filter(slug="vision").update(
        workspace_idle=Team.WorkspaceIdle.OFF, workspace_max_hours=0.01
    )
    job = running_workspace(quick["alice"], "longrun")
    # When it has run that long, Then it is warned, then stopped after the grace period
    wait_for(lambda: job.pk in workspace_idle_run().warned, timeout=60, interval=1)
    assert (
        "it has run the team's maximum of 0.01 h"
        in fresh(job).events.get(reason="WorkspaceIdle").message
    )
    wait_for(lambda: job.pk in workspace_idle_run().stopped, timeout=40, interval=1)
    stopped = wait_for(lambda: (j := fresh(job)).state == JobState.STOPPED and j, timeout=60)
    assert stopped.events.filter(reason="LifetimeStopped").count() == 1
    assert stopped.reason == "LifetimeStopped"
    assert stopped.message.startswith("Stopped at team vision's maximum lifetime of 0.01 h")
    assert "maximum lifetime of 0.01 h" in why_column(quick["alice"], job)
