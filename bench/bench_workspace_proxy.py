"""The workspace proxy under load: do the portal's pages keep answering while 20 notebooks
stream output through it?

Run: .venv/bin/python -m bench workspace_proxy      (make bench NAME=workspace_proxy)
     .venv/bin/python bench/bench_workspace_proxy.py [--notebooks N] [--repeat N]

Sets up, in a database of its own (``gpu_portal_bench_proxy``): the demo's teams and users,
the sandbox (profile ``small``) running N real JupyterLab servers (CPU-only workspaces of
alice's), the portal served by gunicorn as deployed, and the workspace proxy (uvicorn) in
front of it, as ``make run`` serves them. Then, signed in as alice:

1. *idle*: the job list, the Workspaces page and a notebook's ``/api/status``, through the
   proxy, and the job list straight from gunicorn (the floor: no proxy);
2. *streaming*: N notebooks each run a cell printing a line every 100 ms (about 10 kernel
   messages a second each, a training loop's log) over the proxied kernel WebSocket, read as
   they come; the same requests again, interleaved.

Figures: each page's median and p95, its ratio to the same page idle, and the messages per
second the proxy carried meanwhile. Open notebooks hold coroutines in the proxy, never a
gunicorn worker, so the pages should barely move.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.harness import REPO_ROOT, django_setup, interleaved, start

DATABASE = "gpu_portal_bench_proxy"
REDIS_DB = 12
# A training loop's log: a line every 100 ms. (The kernels run on this machine, beside the
# portal; on a cluster they run on GPU nodes, so a faster stream here measures the kernels.)
STREAM_CELL = "import time\nfor i in range(10**9):\n    print(i, flush=True)\n    time.sleep(0.1)"


def _get(url: str, cookie: str) -> int:
    response = httpx.get(url, headers={"Cookie": cookie}, timeout=30)
    response.raise_for_status()
    return response.status_code


def _post(url: str, cookie: str, origin: str) -> dict[str, Any]:
    response = httpx.post(url, json={}, headers={"Cookie": cookie, "Origin": origin}, timeout=30)
    response.raise_for_status()
    return dict(response.json())


class Stream(threading.Thread):
    """One notebook streaming a cell's output over the proxied kernel WebSocket."""

    def __init__(self, base: str, cookie: str, origin: str) -> None:
        super().__init__(daemon=True)
        self.base, self.cookie, self.origin = base, cookie, origin
        self.messages = 0
        self.stop = threading.Event()
        self.error = ""

    def run(self) -> None:
        import websocket

        try:
            kernel = _post(f"{self.base}/api/kernels", self.cookie, self.origin)["id"]
            session = uuid.uuid4().hex
            ws = websocket.create_connection(
                f"{self.base.replace('http', 'ws', 1)}/api/kernels/{kernel}/channels"
                f"?session_id={session}",
                header=[f"Cookie: {self.cookie}"],
                origin=self.origin,
                timeout=30,
            )
            ws.send(json.dumps({
                "header": {"msg_id": uuid.uuid4().hex, "msg_type": "execute_request",
                           "username": "", "session": session, "date": "", "version": "5.3"},
                "parent_header": {}, "metadata": {}, "channel": "shell",
                "content": {"code": STREAM_CELL, "silent": False, "store_history": False,
                            "user_expressions": {}, "allow_stdin": False,
                            "stop_on_error": True},
            }))  # fmt: skip
            while not self.stop.is_set():
                ws.recv()
                self.messages += 1
            ws.close()
        except Exception as exc:  # noqa: BLE001 - reported in the results, not raised
            self.error = str(exc)


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _wait_http(url: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            httpx.get(url, timeout=2)
            return  # answering, whatever it says
        except httpx.TransportError:
            time.sleep(0.2)
    raise TimeoutError(f"{url} did not answer")


def _workspaces(count: int, workdir: Path) -> tuple[Any, list[Any]]:
    """The sandbox with ``count`` of alice's workspaces running (applied and tracked in
    this process: no worker needed)."""
    from django.conf import settings
    from django.contrib.auth.models import User
    from django.core.management import call_command

    from cluster import kube
    from jobs.models import Job, JobState
    from jobs.services.admission import admission_run
    from jobs.services.apply import job_apply
    from jobs.services.submit import job_submit
    from jobs.tracking.reconcile import cluster_reconcile
    from teams.models import Team
    from tests.sandbox_process import SandboxProcess
    from workspaces.selectors import workspace_endpoint

    call_command("seed_demo", verbosity=0, stdout=open(os.devnull, "w"))  # noqa: SIM115
    Team.objects.filter(slug="vision").update(cohort=None)
    sandbox = SandboxProcess(workdir / "sandbox", "small", 10.0).start()
    settings.KUBECONFIG, settings.KUBE_CONTEXT = str(sandbox.kubeconfig), ""
    kube.reset_client()
    call_command("cluster_sync", stdout=open(os.devnull, "w"))  # noqa: SIM115
    alice = User.objects.get(username="alice")
    jobs = [
        job_submit(
            user=alice,
            data={
                "team": "vision",
                "name": f"nb{i}",
                "kind": "workspace",
                "workspace_image": "jupyter-pytorch",
                "gpu": {"count": 0},
                "cpu": "500m",
                "memory": "1Gi",
            },
        )
        for i in range(count)
    ]
    vision = Team.objects.get(slug="vision")
    admission_run(team_id=vision.pk)
    for job in jobs:
        job_apply(job_id=job.pk)
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        cluster_reconcile()
        running = list(Job.objects.filter(pk__in=[j.pk for j in jobs]))
        if all(j.state == JobState.RUNNING and workspace_endpoint(job=j) for j in running):
            return sandbox, running
        time.sleep(1)
    raise TimeoutError("the workspaces did not all run")


def _serve(env: dict[str, str], workdir: Path) -> tuple[list[subprocess.Popen[bytes]], str, str]:
    """gunicorn (as deployed) and the proxy in front of it: (processes, proxy, gunicorn)."""
    web_port, proxy_port = _free_port(), _free_port()
    web = f"http://127.0.0.1:{web_port}"
    log = open(workdir / "serve.log", "ab")  # noqa: SIM115 - kept open for the children
    gunicorn = subprocess.Popen(
        [sys.executable, "-m", "gunicorn", "portal.wsgi", "--config", "gunicorn.conf.py",
         "--bind", f"127.0.0.1:{web_port}"],
        cwd=REPO_ROOT, env=env, stdout=log, stderr=subprocess.STDOUT,
    )  # fmt: skip
    proxy = subprocess.Popen(
        [sys.executable, "-m", "uvicorn", "workspaces.proxy.asgi:application", "--host",
         "127.0.0.1", "--port", str(proxy_port), "--no-access-log"],
        cwd=REPO_ROOT, env={**env, "WORKSPACE_PROXY_UPSTREAM": web},
        stdout=log, stderr=subprocess.STDOUT,
    )  # fmt: skip
    _wait_http(f"{web}/healthz")
    _wait_http(f"http://127.0.0.1:{proxy_port}/healthz")
    return [gunicorn, proxy], f"http://127.0.0.1:{proxy_port}", web


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--notebooks", type=int, default=20)
    parser.add_argument("--repeat", type=int, default=40)
    args = parser.parse_args()
    django_setup(DATABASE, REDIS_DB)
    from django.conf import settings
    from django.contrib.auth.models import User
    from django.test import Client

    report = start(
        "workspace_proxy",
        "Portal pages while notebooks stream through the workspace proxy",
        notebooks=args.notebooks,
        repeat=args.repeat,
    )
    workdir = REPO_ROOT / "var" / "bench-proxy"
    workdir.mkdir(parents=True, exist_ok=True)
    sandbox, jobs = _workspaces(args.notebooks, workdir)
    env = {
        **os.environ,
        "DATABASE_URL": os.environ["DATABASE_URL"],
        "KUBECONFIG": str(settings.KUBECONFIG),
        "WEB_CONCURRENCY": "3",
    }
    processes, proxy, web = _serve(env, workdir)
    streams: list[Stream] = []
    try:
        client = Client()
        client.force_login(User.objects.get(username="alice"))
        cookie = f"sessionid={client.cookies['sessionid'].value}"
        status = f"{proxy}/workspaces/{jobs[0].pk}/api/status"
        requests: dict[str, Callable[[], object]] = {
            "job list, through the proxy": lambda: _get(f"{proxy}/jobs/", cookie),
            "Workspaces page, through the proxy": lambda: _get(f"{proxy}/workspaces/", cookie),
            "a notebook's /api/status, through the proxy": lambda: _get(status, cookie),
            "job list, gunicorn alone": lambda: _get(f"{web}/jobs/", cookie),
        }
        idle = interleaved(requests, args.repeat)
        for case, stats in idle.items():
            report.row(f"{case} (idle)", stats)
        streams = [Stream(f"{proxy}/workspaces/{j.pk}", cookie, proxy) for j in jobs]
        for stream in streams:
            stream.start()
        time.sleep(5)  # every kernel streaming
        before = sum(s.messages for s in streams)
        began = time.monotonic()
        busy = interleaved(requests, args.repeat)
        rate = (sum(s.messages for s in streams) - before) / (time.monotonic() - began)
        for case, stats in busy.items():
            report.row(f"{case} ({args.notebooks} streaming)", stats, baseline=f"{case} (idle)")
        failed = [s.error for s in streams if s.error]
        report.note(f"kernel messages carried while measuring: {rate:.0f}/s")
        if failed:
            report.note(f"{len(failed)} stream(s) failed: {failed[0]}")
        page = report.find(f"job list, through the proxy ({args.notebooks} streaming)")
        report.goal(
            "the job list answers within 2× its idle median while notebooks stream",
            met=bool(page.ratio is not None and page.ratio < 2 and not failed),
            value=f"{page.ratio}×, {rate:.0f} kernel messages/s",
        )
    finally:
        for stream in streams:
            stream.stop.set()
        for process in processes:
            process.terminate()
            process.wait(timeout=20)
        sandbox.stop()
    report.finish()


if __name__ == "__main__":
    main()
