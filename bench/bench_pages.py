"""Job pages with 10,000 jobs in the database: server time and SQL queries per page.

Run: .venv/bin/python -m bench pages      (make bench NAME=pages)
     .venv/bin/python bench/bench_pages.py [--repeat N] [--quick]

Fills a database of its own (``gpu_portal_bench_pages``) with five teams, members,
quotas and 1,000 jobs (a realistic mix of states, kinds and GPU requests; each job
with its timeline, two measured jobs with 20 events), then grows it to 10,000 jobs
(the 9,000 added are finished history: the active set is bounded by the cluster, the
history is not). At each size it requests, through Django's test client logged in as
a member of three teams:

- the HTML job list: first page, a deep page, a filter with 5 rows and one with a full
  page (the page size is fixed, so a team filter sets the rows on the page);
- the job page of a queued job and of a finished one, and the htmx partial the job
  page polls every 2 s while the job is not final;
- the REST equivalents: ``GET /api/v1/jobs/`` (same pages) and ``/api/v1/jobs/<id>/``;
- the login page, the framework's floor, interleaved with the pages above.

Figures: server time median and p95 (in-process, no network), SQL queries per request
(they must not grow with the jobs in the database or the rows on the page), the ratio of
each page at 10,000 jobs to the same page at 1,000, and EXPLAIN ANALYZE of the list's
queries at 10,000 jobs (does the ORDER BY use an index, or sort every visible job?).
"""

from __future__ import annotations

import argparse
import random
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any
from unittest import mock

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.harness import Report, Stats, django_setup, interleaved, start

PAGE_SIZE = (
    50  # the job list's page size (jobs/selectors/jobs.py JOB_LIST_PAGE_SIZE, also the API's)
)
SMALL, LARGE = 1_000, 10_000
USER = "alice"
TEAMS = ("vision", "nlp", "speech", "robotics", "tiny")
MEMBER_OF = ("vision", "nlp", "tiny")  # the measured user's teams
TINY_JOBS = 5  # jobs of team "tiny": the list filtered to it has 5 rows
# Share of each team in the jobs (tiny is fixed at TINY_JOBS).
TEAM_WEIGHTS = {"vision": 45, "nlp": 30, "speech": 15, "robotics": 10}
# States of the first 1,000 jobs; the history added afterwards is all finished.
STATE_WEIGHTS = {
    "succeeded": 55,
    "failed": 14,
    "cancelled": 11,
    "running": 9,
    "pending": 4,
    "queued": 7,
}
FINAL_WEIGHTS = {"succeeded": 70, "failed": 17, "cancelled": 13}
MEASURED_EVENTS = 20


def _specs() -> list[dict[str, Any]]:
    """Submitted once through ``job_submit``: their spec, manifests and demand are copied."""
    torch = "nvcr.io/nvidia/pytorch:24.05-py3"
    return [
        {
            "team": "vision",
            "name": "resnet50",
            "kind": "training",
            "image": torch,
            "command": ["torchrun", "train.py"],
            "args": ["--epochs", "10"],
            "env": {"SEED": "1"},
            "gpu": {"count": 1},
            "max_runtime_seconds": 7200,
        },
        {
            "team": "vision",
            "name": "vit-large",
            "kind": "training",
            "image": torch,
            "command": ["torchrun", "--nproc-per-node=8", "train.py"],
            "args": ["--model", "vit_large", "--batch-size", "512"],
            "env": {"NCCL_DEBUG": "WARN", "WANDB_PROJECT": "vit"},
            "gpu": {"count": 8, "product": "NVIDIA-A100-SXM4-80GB"},
            "workers": 2,
            "priority": "high",
            "retries": 2,
        },
        {
            "team": "vision",
            "name": "embedder",
            "kind": "inference",
            "image": "ghcr.io/acme/embedder:1.2",
            "gpu": {"count": 1, "sharing": "mig", "mig_profile": "1g.10gb"},
            "replicas": 2,
            "port": 8080,
            "health_path": "/healthz",
        },
        {
            "team": "nlp",
            "name": "llama-finetune",
            "kind": "training",
            "image": torch,
            "command": ["python", "finetune.py"],
            "args": ["--lora", "--epochs", "3"],
            "gpu": {"count": 4, "product": "NVIDIA-H100-80GB-HBM3"},
            "cpu": "32",
            "memory": "256Gi",
            "max_runtime_seconds": 86400,
        },
        {
            "team": "speech",
            "name": "whisper-eval",
            "kind": "training",
            "image": torch,
            "command": ["python", "eval.py"],
            "gpu": {"count": 1, "sharing": "shared"},
            "priority": "low",
        },
        {
            "team": "nlp",
            "name": "chat-serve",
            "kind": "inference",
            "image": "ghcr.io/acme/chat:3.0",
            "gpu": {"count": 2},
            "replicas": 3,
            "port": 8000,
            "health_path": "/ready",
        },
    ]


def _weighted(rng: random.Random, weights: dict[str, int]) -> str:
    return rng.choices(list(weights), weights=list(weights.values()))[0]


@contextmanager
def _stored_timestamps(*models: Any) -> Iterator[None]:
    """bulk_create with the ``created_at`` values given: history has to be in the past."""
    fields = [model._meta.get_field("created_at") for model in models]
    for f in fields:
        f.auto_now_add = False
    try:
        yield
    finally:
        for f in fields:
            f.auto_now_add = True


class Data:
    """The benchmark's teams, users and jobs; ``add_jobs`` grows the job table."""

    def __init__(self) -> None:
        import io

        from django.contrib.auth.models import User
        from django.core.management import call_command

        from jobs.models import Job
        from jobs.services import submit as services
        from teams.models import GpuQuota, Membership, Team

        call_command("seed_demo", stdout=io.StringIO())
        for slug in TEAMS:
            Team.objects.get_or_create(
                slug=slug, defaults={"name": slug.title(), "namespace": f"team-{slug}"}
            )
        self.teams = {t.slug: t for t in Team.objects.all()}
        for team in self.teams.values():
            for resource, limit in (
                ("nvidia.com/gpu", 64),
                ("nvidia.com/mig-1g.10gb", 16),
                ("nvidia.com/gpu.shared", 16),
                ("cpu", 512),
                ("memory", 4096),
            ):
                GpuQuota.objects.update_or_create(
                    team=team, resource=resource, defaults={"limit": limit}
                )
        self.user = User.objects.get(username=USER)
        self.members: dict[str, list[Any]] = {slug: [] for slug in TEAMS}
        users = User.objects.bulk_create(
            User(username=f"researcher{i:02}", email=f"researcher{i:02}@example.com")
            for i in range(40)
        )
        memberships = []
        for i, user in enumerate(users):
            for slug in (TEAMS[i % 4], TEAMS[(i + 1) % 4]) if i % 3 == 0 else (TEAMS[i % 4],):
                memberships.append(Membership(user=user, team=self.teams[slug]))
                self.members[slug].append(user)
        for slug in MEMBER_OF:
            memberships.append(Membership(user=self.user, team=self.teams[slug]))
            self.members[slug].append(self.user)
        Membership.objects.bulk_create(memberships, ignore_conflicts=True)
        self.members["tiny"].append(users[0])

        # A few real submissions (as the platform admin, who may submit for any team):
        # the copies carry exactly what a submitted row holds. Admission is not queued.
        admin = User.objects.get(username="admin")
        with mock.patch.object(services, "admission_enqueue"):
            self.templates = [services.job_submit(user=admin, data=spec) for spec in _specs()]
        Job.objects.all().delete()
        self.rng = random.Random(7)
        self.now = datetime.now().astimezone()
        self.oldest = self.now
        self.count = 0

    def add_jobs(self, count: int, *, history: bool) -> None:
        """Add ``count`` jobs older than the ones already there, with their timelines."""
        from jobs.models import Job, JobEvent

        rng = self.rng
        jobs: list[Job] = []
        when = self.oldest
        tiny_left = 0 if self.count else TINY_JOBS
        for i in range(count):
            when -= timedelta(seconds=rng.randint(60, 1800))
            if tiny_left and i % 97 == 3:
                slug, tiny_left = "tiny", tiny_left - 1
            else:
                slug = _weighted(rng, TEAM_WEIGHTS)
            template = rng.choice(self.templates)
            state = _weighted(rng, FINAL_WEIGHTS if history else STATE_WEIGHTS)
            jobs.append(self._job(template, slug, state, when, f"{template.name}-{i:05}"))
        with _stored_timestamps(Job, JobEvent):
            created = Job.objects.bulk_create(jobs, batch_size=1000)
            JobEvent.objects.bulk_create(
                (e for job in created for e in self._events(job)), batch_size=5000
            )
        self.oldest = when
        self.count += count

    def _job(self, template: Any, slug: str, state: str, when: datetime, name: str) -> Any:
        from cluster.priority_classes import PRIORITY_CLASS_VALUES
        from jobs.models import Job

        rng = self.rng
        team = self.teams[slug]
        spec = {**template.spec, "team": slug, "name": name}
        admitted = None if state == "queued" else when + timedelta(seconds=rng.randint(1, 600))
        applied = admitted and admitted + timedelta(seconds=2)
        started = (
            applied + timedelta(seconds=rng.randint(5, 900))
            if applied and state not in ("pending", "cancelled")
            else None
        )
        final = state in FINAL_WEIGHTS
        finished = (
            (started or admitted or when) + timedelta(hours=rng.randint(1, 30)) if final else None
        )
        pods = [
            {
                "name": f"{name}-{k}",
                "node": "" if state == "pending" else f"gpu-{rng.randint(0, 499):05}",
                "phase": {"succeeded": "Succeeded", "failed": "Failed", "running": "Running"}.get(
                    state, "Pending"
                ),
            }
            for k in range(max(spec.get("workers", 1), spec.get("replicas", 1)))
        ]
        reasons = {
            "queued": ("Submitted", "Waiting for admission against the team's quota."),
            "pending": (
                "Unschedulable",
                "0/540 nodes are available: 500 Insufficient nvidia.com/gpu.",
            ),
            "running": ("Running", "All pods are running."),
            "succeeded": ("Completed", "The job completed."),
            "failed": ("BackoffLimitExceeded", "Job has reached the specified backoff limit"),
            "cancelled": ("Cancelled", "Cancelled by researcher07."),
        }
        reason, message = reasons[state]
        return Job(
            team=team,
            owner=rng.choice(self.members[slug]),
            name=name,
            kind=template.kind,
            priority=template.priority,
            priority_value=PRIORITY_CLASS_VALUES[template.priority],
            state=state,
            reason=reason,
            message=message,
            spec=spec,
            manifests=template.manifests,
            demand=template.demand,
            gpu_count=template.gpu_count,
            advice="Ask for fewer GPUs per worker, or wait: 3 jobs of your team hold the quota."
            if state == "pending"
            else "",
            placement={"nodes": sorted({p["node"] for p in pods if p["node"]}), "pods": pods}
            if applied
            else {},
            exit_code={"succeeded": 0, "failed": 1}.get(state),
            namespace=team.namespace,
            object_name=f"{name}-{rng.randint(1, 99999)}",
            created_at=when,
            admitted_at=admitted,
            applied_at=applied,
            started_at=started,
            finished_at=finished,
        )

    def _events(self, job: Any) -> list[Any]:
        from jobs.models import JobEvent

        steps = [("Submitted", "Submitted by a researcher.", "portal", "Normal")]
        if job.admitted_at:
            steps.append(("Admitted", "Admitted against the team's quota.", "portal", "Normal"))
        if job.applied_at:
            steps.append(("SuccessfulCreate", "Created pod", "kubernetes", "Normal"))
            steps.append(("Scheduled", "Successfully assigned to a node", "kubernetes", "Normal"))
        if job.started_at:
            steps.append(("Started", "Started container main", "kubernetes", "Normal"))
        if job.state == "pending":
            steps.append(("FailedScheduling", job.message, "kubernetes", "Warning"))
        if job.finished_at:
            steps.append((job.reason, job.message, "portal", "Normal"))
        return [
            JobEvent(
                job=job,
                reason=reason,
                message=message,
                source=source,
                type=type_,
                created_at=job.created_at + timedelta(seconds=k),
            )
            for k, (reason, message, source, type_) in enumerate(steps)
        ]

    def measured_jobs(self) -> dict[str, Any]:
        """A queued and a finished job of the user's team, each with a 20-event timeline."""
        from jobs.models import Job, JobEvent

        picked = {}
        for label, state in (("queued", "queued"), ("finished", "succeeded")):
            job = Job.objects.filter(team__slug="vision", state=state).order_by("created_at").last()
            assert job is not None
            have = job.events.count()
            with _stored_timestamps(JobEvent):
                JobEvent.objects.bulk_create(
                    JobEvent(
                        job=job,
                        reason="BackOff" if k % 2 else "Pulled",
                        message=f"Back-off pulling image (attempt {k})",
                        source="kubernetes",
                        type="Warning" if k % 2 else "Normal",
                        dedupe_key=f"bench-{k}",
                        created_at=job.created_at + timedelta(seconds=30 + k),
                    )
                    for k in range(MEASURED_EVENTS - have)
                )
            picked[label] = job
        return picked


def pages(jobs: dict[str, Any], num_pages: int) -> dict[str, str]:
    """The URLs measured, by case name (sizes are added to the case in the report)."""
    deep = max(1, num_pages - 1)  # the last full page: the largest OFFSET with 50 rows
    queued, finished = jobs["queued"].pk, jobs["finished"].pk
    return {
        "job list, first page": "/jobs/",
        "job list, deep page": f"/jobs/?page={deep}",
        "job list, 5 rows (team=tiny)": "/jobs/?team=tiny",
        "job list, 50 rows (team=vision)": "/jobs/?team=vision",
        "job page, queued job": f"/jobs/{queued}/",
        "job page, finished job": f"/jobs/{finished}/",
        "job live partial (polled), queued job": f"/jobs/{queued}/live/",
        "API list, first page": "/api/v1/jobs/",
        "API list, deep page": f"/api/v1/jobs/?page={deep}",
        "API list, 5 rows (team=tiny)": "/api/v1/jobs/?team=tiny",
        "API list, 50 rows (team=vision)": "/api/v1/jobs/?team=vision",
        "API job, queued job": f"/api/v1/jobs/{queued}/",
    }


def _get(client: Any, url: str) -> Callable[[], object]:
    headers = {"HX-Request": "true"} if url.endswith("/live/") else {}

    def fetch() -> object:
        response = client.get(url, headers=headers)
        if response.status_code != 200:
            raise SystemExit(f"GET {url}: {response.status_code}")
        return response

    return fetch


def count_queries(fn: Callable[[], object]) -> int:
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    with CaptureQueriesContext(connection) as ctx:
        fn()
    return len(ctx.captured_queries)


def rows_shown(client: Any, url: str) -> int | None:
    """Rows on a list page (a check that the 5- and 50-row cases are what they say)."""
    response = client.get(url)
    if url.startswith("/api/"):
        return len(response.json()["results"]) if "results" in response.json() else None
    if "/jobs/?" in url or url == "/jobs/":
        return response.content.decode().count("<tr>\n      <td>")
    return None


def measure(
    report: Report, size: int, urls: dict[str, str], repeat: int, data: Data
) -> dict[str, tuple[Stats, int, float]]:
    from django.test import Client

    client = Client(HTTP_HOST="localhost")
    client.force_login(data.user)
    anonymous = Client(HTTP_HOST="localhost")
    floor = f"login page (framework floor), {size:,} jobs"
    fns: dict[str, Callable[[], object]] = {floor: _get(anonymous, "/login/")}
    fns.update({case: _get(client, url) for case, url in urls.items()})
    queries = {name: count_queries(fn) for name, fn in fns.items()}
    stats = interleaved(fns, repeat)
    results = {}
    report.row(floor, stats[floor], queries=queries[floor])
    for case, url in urls.items():
        label = f"{case}, {size:,} jobs"
        baseline = f"{case}, {SMALL:,} jobs" if size != SMALL else floor
        # The page's median over the floor's, both sampled interleaved in this phase: it
        # carries over between the 1,000- and 10,000-job phases when the host's load shifts.
        x_floor = round(stats[case].median / stats[floor].median, 3)
        extra: dict[str, Any] = {"x_floor": x_floor, "queries": queries[case], "url": url}
        rows = rows_shown(client, url)
        if rows is not None:
            extra["rows"] = rows
        report.row(label, stats[case], baseline=baseline, **extra)
        results[case] = (stats[case], queries[case], x_floor)
    return results


def vacuum() -> None:
    """What autovacuum does to a table in steady state: statistics and the visibility map
    (without it no index-only scan, and COUNT(*) reads every row)."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("VACUUM ANALYZE jobs_job, jobs_jobevent")


def explain(report: Report, data: Data, urls: dict[str, str]) -> dict[str, list[str]]:
    """EXPLAIN ANALYZE the job-table queries the list pages run, as the view sent them."""
    from django.db import connection
    from django.test import Client
    from django.test.utils import CaptureQueriesContext

    client = Client(HTTP_HOST="localhost")
    client.force_login(data.user)
    plans: dict[str, list[str]] = {}
    for case in ("job list, first page", "job list, deep page", "API list, deep page"):
        with CaptureQueriesContext(connection) as ctx:
            client.get(urls[case])
        job_queries = [q["sql"] for q in ctx.captured_queries if 'FROM "jobs_job"' in q["sql"]]
        with connection.cursor() as cursor:
            for k, sql in enumerate(job_queries, 1):
                cursor.execute(f"EXPLAIN (ANALYZE, BUFFERS) {sql}")
                plan = [row[0] for row in cursor.fetchall()]
                what = "COUNT" if sql.startswith("SELECT COUNT") else f"query {k}"
                plans[f"{case}: {what}"] = [sql, *plan]
                report.note(
                    f"EXPLAIN {case} ({what}) at {data.count:,} jobs: {_plan_summary(plan)}"
                )
    return plans


def _plan_summary(plan: list[str]) -> str:
    scans = []
    for line in plan:
        node = line.strip().removeprefix("->  ").split("  (")[0]
        if " on jobs_job" in node and node not in scans:
            scans.append(node.replace(" on jobs_job", ""))
    sorts = []  # sorts of job rows (not the few team ids of the membership subquery)
    for i, line in enumerate(plan):
        if "Sort  (" in line and "actual" in line and "jobs_job" in "".join(plan[i + 1 : i + 3]):
            node = line.strip().removeprefix("->  ").split("  (")[0].lower()
            rows = line.split("actual")[1].split("rows=")[1].split()[0]
            sorts.append(f"{node} of {rows} rows")
    total = next((line for line in plan if line.startswith("Execution Time")), "")
    return (
        f"{'; '.join(scans) or 'no scan of jobs_job'}"
        + (f"; {sorts[0]}" if sorts else "; no sort of job rows")
        + f"; {total.lower()}"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=40, help="requests per page and size")
    parser.add_argument("--quick", action="store_true", help="10 requests per page")
    args = parser.parse_args()
    repeat = 10 if args.quick else args.repeat

    django_setup("gpu_portal_bench_pages", redis_db=7)
    report = start(
        "pages",
        "Job list and job page with 1,000 and 10,000 jobs in the database",
        repeat=repeat,
        page_size=PAGE_SIZE,
        sizes=[SMALL, LARGE],
        user=f"{USER}, member of {', '.join(MEMBER_OF)}",
    )
    from jobs.models import Job

    report.note(
        f"pages hold {PAGE_SIZE} jobs (the list's and the API's page size): "
        f"'5 rows' filters to a team with {TINY_JOBS} jobs, '50 rows' to a team with hundreds"
    )
    report.note(
        "the 9,000 jobs added for 10,000 are finished history: the queue and the running "
        "jobs (about a fifth of the first 1,000) do not grow; tables VACUUM ANALYZEd as "
        "autovacuum would"
    )
    data = Data()
    data.add_jobs(SMALL, history=False)
    jobs = data.measured_jobs()
    vacuum()
    visible = Job.objects.filter(team__slug__in=MEMBER_OF).count()
    small = measure(report, SMALL, pages(jobs, -(-visible // PAGE_SIZE)), repeat, data)

    data.add_jobs(LARGE - SMALL, history=True)
    vacuum()
    visible = Job.objects.filter(team__slug__in=MEMBER_OF).count()
    urls = pages(jobs, -(-visible // PAGE_SIZE))
    large = measure(report, LARGE, urls, repeat, data)
    report.params["visible_jobs_at_10k"] = visible

    for case in small:
        report.growth(f"{case} median", SMALL, LARGE, small[case][0].median, large[case][0].median)
        report.growth(
            f"{case}, median over the login page's", SMALL, LARGE, small[case][2], large[case][2]
        )
    grow_jobs = {c: (small[c][1], large[c][1]) for c in small if small[c][1] != large[c][1]}
    report.goal(
        "queries do not grow with jobs",
        met=not grow_jobs,
        value="same count at 1,000 and 10,000 jobs on every page"
        if not grow_jobs
        else "; ".join(f"{c}: {a} → {b}" for c, (a, b) in grow_jobs.items()),
    )
    grow_rows = []
    for prefix in ("job list", "API list"):
        five = large[f"{prefix}, 5 rows (team=tiny)"][1]
        full = large[f"{prefix}, 50 rows (team=vision)"][1]
        if five != full:
            grow_rows.append(f"{prefix}: {five} queries for 5 rows, {full} for 50")
        report.growth(
            f"{prefix} median, rows on the page (10,000 jobs)",
            TINY_JOBS,
            PAGE_SIZE,
            large[f"{prefix}, 5 rows (team=tiny)"][0].median,
            large[f"{prefix}, 50 rows (team=vision)"][0].median,
        )
    report.goal(
        "queries do not grow with rows on the page",
        met=not grow_rows,
        value="same count for 5 and 50 rows" if not grow_rows else "; ".join(grow_rows),
    )
    report.params["explain_at_10k"] = explain(report, data, urls)
    report.finish()
    return 0


if __name__ == "__main__":
    sys.exit(main())
