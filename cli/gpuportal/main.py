"""``gpuportal``: submit, follow and manage GPU jobs from a terminal.

Every command talks to the portal's REST API with the token ``gpuportal login`` stored;
``GPU_PORTAL_URL`` and ``GPU_PORTAL_TOKEN`` override it.
"""

from __future__ import annotations

import sys
import time
from collections import defaultdict
from typing import Any

import click

from gpuportal import __version__, config
from gpuportal.client import EXIT_JOB_FAILED, Api, CliError
from gpuportal.output import Column, console, dump, output_option, show, text
from gpuportal.spec import apply_overrides, load
from gpuportal.workspaces import workspace

FINAL_STATES = ("succeeded", "failed", "cancelled")
POLL_SECONDS = 2.0

CONTEXT = {"help_option_names": ["-h", "--help"], "max_content_width": 100}


def api() -> Api:
    return Api(config.load())


@click.group(context_settings=CONTEXT)
@click.version_option(__version__, prog_name="gpuportal")
def cli() -> None:
    """Submit, follow and manage GPU jobs on GPU Portal.

    \b
    Start with:
      gpuportal login --url https://gpu.example.com
      gpuportal submit -f job.yaml --wait
      gpuportal ls
    """


# --- who am I --------------------------------------------------------------------------


@cli.command()
@click.option(
    "--url", prompt="Portal URL", help="The portal's address, e.g. https://gpu.example.com"
)
@click.option(
    "--token",
    help="An API token (asked for, hidden, when not given). Create one on the portal.",
)
def login(url: str, token: str | None) -> None:
    """Check an API token against the portal and store it for the next commands.

    The URL and token go to your config directory (~/.config/gpuportal/config.yaml on
    Linux), readable by you only (0600). GPU_PORTAL_URL and GPU_PORTAL_TOKEN override it.

    \b
    Examples:
      gpuportal login --url https://gpu.example.com
      gpuportal login --url https://gpu.example.com --token "$TOKEN"
    """
    if token is None:
        token = click.prompt("API token", hide_input=True)
    me = Api(config.Config(url=url.rstrip("/"), token=token.strip())).get("me/")
    path = config.save(url=url, token=token.strip())
    click.echo(f"Logged in to {url.rstrip('/')} as {me['username']}; token stored in {path}")


@cli.command()
@output_option
def whoami(output: str) -> None:
    """Who the token belongs to, and your teams.

    \b
    Example:
      gpuportal whoami -o json
    """
    me = api().get("me/")
    if output in ("json", "yaml"):
        dump(me, output)
        return
    role = "platform admin" if me["is_platform_admin"] else "user"
    click.echo(f"{me['username']} ({role}) at {config.load().url}")
    show(
        me["teams"],
        [
            Column("team", lambda t: t["slug"]),
            Column("role", lambda t: t["role"]),
            Column("namespace", lambda t: t["namespace"], wide=True),
        ],
        output,
    )


# --- submitting ------------------------------------------------------------------------

spec_options = [
    click.option("-f", "--file", "path", help="The job spec, YAML or JSON (- reads stdin)."),
    click.option("--template", help="Start from this template: NAME or TEAM/NAME."),
    click.option("--team", help="The team to submit to."),
    click.option("--name", help="The job's name."),
    click.option("--gpus", type=int, help="GPUs per pod (gpu.count)."),
    click.option("--gpu-product", help="e.g. NVIDIA-A100-SXM4-80GB (gpu.product)."),
    click.option("--image", help="The container image."),
    click.option(
        "--cluster",
        help="Where it runs: a cluster's name (gpuportal clusters), or any (the default: "
        "where it would start soonest).",
    ),
    click.option(
        "--launcher",
        help="What runs a training job: job, pytorchjob or trainjob (gpuportal launchers).",
    ),
    click.option(
        "--set",
        "sets",
        multiple=True,
        metavar="FIELD=VALUE",
        help="Any field, by its path: --set gpu.count=4 --set env.SEED=7 (repeatable).",
    ),
]


def with_spec_options(command: Any) -> Any:
    for option in reversed(spec_options):
        command = option(command)
    return command


def build_spec(path: str | None, sets: tuple[str, ...], **fields: Any) -> dict[str, Any]:
    return apply_overrides(load(path), sets, **fields)


@cli.command()
@with_spec_options
@click.option("--wait", is_flag=True, help="Follow the job to its end; exit with its outcome.")
@output_option
def submit(
    path: str | None,
    template: str | None,
    sets: tuple[str, ...],
    wait: bool,
    output: str,
    **fields: Any,
) -> None:
    """Submit a job: the spec from a file (the API's contract), with flags over it.

    Everything the portal checks is checked here too: a refused spec prints each field's
    problem and exits 3, and nothing is stored.

    \b
    Examples:
      gpuportal submit -f job.yaml
      gpuportal submit -f job.yaml --gpus 4 --set env.SEED=7 --wait
      gpuportal submit -f job.yaml --launcher trainjob
      gpuportal submit -f job.yaml --cluster h200-east
      gpuportal submit --template vision/a100-base --name run-42
    """
    if not path and not template:
        raise click.UsageError("Give the spec with -f FILE, or --template NAME (or both).")
    spec = build_spec(path, sets, **fields)
    job = api().post("jobs/", spec, template=template)
    if output in ("json", "yaml"):
        dump(job, output)
    else:
        click.echo(
            f"job {job['id']} ({job['name']}) submitted to team {job['team']}: {job['state']}"
        )
    if wait:
        follow(job["id"])


def follow(job_id: int) -> None:
    """Print each change of state until the job ends (an inference job: until it runs),
    with a live status line on a terminal; exit with the job's outcome."""
    client = api()
    seen: tuple[str, str] = ("", "")
    out = console()
    with out.status("waiting…") as status:
        while True:
            job = client.get(f"jobs/{job_id}/")
            now = (job["state"], job["reason"])
            if now != seen:
                stamp = time.strftime("%H:%M:%S")
                out.print(f"{stamp} {job['state']} ({job['reason'] or '-'}): {job['message']}")
                seen = now
            line = f"job {job_id}: {job['state']}"
            if job.get("queue_position"):
                line += f", position {job['queue_position']['team']} in team {job['team']}"
            status.update(line)
            if job["state"] in FINAL_STATES:
                break
            if job["kind"] == "inference" and job["state"] == "running":
                break
            time.sleep(POLL_SECONDS)
    if job["state"] in ("failed", "cancelled"):
        code = f" (exit code {job['exit_code']})" if job.get("exit_code") is not None else ""
        raise CliError(f"job {job_id} {job['state']}{code}", code=EXIT_JOB_FAILED)


@cli.command()
@with_spec_options
@output_option
def preview(
    path: str | None, template: str | None, sets: tuple[str, ...], output: str, **fields: Any
) -> None:
    """Show the manifests a spec would produce and whether it would start now.

    Nothing is stored. -o json or yaml prints the whole answer.

    \b
    Examples:
      gpuportal preview -f job.yaml
      gpuportal preview -f job.yaml --gpus 8 -o json
    """
    if not path and not template:
        raise click.UsageError("Give the spec with -f FILE, or --template NAME (or both).")
    answer = api().post("jobs/preview/", build_spec(path, sets, **fields), template=template)
    if output in ("json", "yaml"):
        dump(answer, output)
        return
    click.echo(answer["yaml"].rstrip())
    fit = answer["fit"]
    click.echo("---")
    click.echo(f"# Will it fit? {fit['verdict']}: {fit['message']}")
    if fit.get("scheduler_message"):
        click.echo(f"# scheduler: {fit['scheduler_message']}")


# --- reading ---------------------------------------------------------------------------

JOB_COLUMNS = [
    Column("id", lambda j: j["id"]),
    Column("name", lambda j: j["name"]),
    Column("team", lambda j: j["team"]),
    Column("kind", lambda j: j["kind"]),
    Column("gpus", lambda j: j["gpu_count"]),
    Column("state", lambda j: j["state"] + (" (borrowing)" if j.get("borrowing") else "")),
    Column("reason", lambda j: j["reason"]),
    Column("owner", lambda j: j["owner"], wide=True),
    Column("priority", lambda j: j["priority"], wide=True),
    Column("product", lambda j: (j.get("gpu") or {}).get("product"), wide=True),
    Column("created", lambda j: j["created_at"][:16].replace("T", " ")),
    Column("progress", lambda j: progress_text(j), wide=True),
    Column("eta", lambda j: eta_text(j.get("eta_seconds")), wide=True),
    Column("message", lambda j: j["message"], wide=True),
]


def progress_text(job: dict[str, Any]) -> str | None:
    """``42.0% (2100/5000)``, or None before the job reports any."""
    found = job.get("progress")
    if not found:
        return None
    return f"{found['percent']:.1f}% ({found['step']}/{found['total']})"


def eta_text(seconds: float | None) -> str | None:
    """``1h 12m`` / ``4m 10s`` left, or None without an estimate."""
    if seconds is None:
        return None
    whole = round(seconds)
    hours, rest = divmod(whole, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}h {minutes:02d}m" if hours else f"{minutes}m {secs:02d}s"


@cli.command("ls")
@click.option("--team", help="Only this team's jobs (everyone's in it).")
@click.option(
    "--state",
    type=click.Choice(
        ["queued", "pending", "running", "succeeded", "failed", "cancelled", "stopped"]
    ),
    help="Only jobs in this state.",
)
@click.option(
    "--kind", type=click.Choice(["training", "inference", "workspace"]), help="Only this kind."
)
@click.option(
    "--all-teams",
    "all_teams",
    is_flag=True,
    help="Everyone's jobs in all your teams (platform admins: every team).",
)
@click.option("--limit", type=click.IntRange(1, 1000), default=50, show_default=True)
@output_option
def list_jobs(
    team: str | None,
    state: str | None,
    kind: str | None,
    all_teams: bool,
    limit: int,
    output: str,
) -> None:
    """List jobs, newest first: yours by default.

    \b
    Examples:
      gpuportal ls
      gpuportal ls --team vision --state running -o wide
      gpuportal ls --all-teams -o json
    """
    client = api()
    owner = None if (team or all_teams) else client.get("me/")["username"]
    jobs: list[dict[str, Any]] = []
    page = 1
    while len(jobs) < limit:
        found = client.get(
            "jobs/",
            team=team,
            state=state,
            kind=kind,
            owner=owner,
            page=page,
            page_size=min(200, limit),
        )
        jobs += found["results"]
        if not found["next"]:
            break
        page += 1
    show(jobs[:limit], JOB_COLUMNS, output)


@cli.command()
@click.argument("job_id", type=int)
@output_option
def describe(job_id: int, output: str) -> None:
    """A job in full: state and why, queue position, pods, timeline.

    \b
    Example:
      gpuportal describe 42
    """
    client = api()
    job = client.get(f"jobs/{job_id}/")
    events = client.get(f"jobs/{job_id}/events/")
    if output in ("json", "yaml"):
        dump({"job": job, "events": events}, output)
        return
    facts = _job_facts(job)
    width = max(len(name) for name, _ in facts) + 1
    for name, value in facts:
        click.echo(f"{name + ':':<{width}} {value}")
    pods = (job.get("placement") or {}).get("pods") or []
    if pods:
        click.echo("\nPods:")
        show(
            pods,
            [
                Column("name", lambda p: p.get("name")),
                Column("node", lambda p: p.get("node")),
                Column("phase", lambda p: p.get("phase")),
            ],
            "table",
        )
    click.echo("\nTimeline:")
    show(
        events,
        [
            Column("time", lambda e: e["created_at"][11:19]),
            Column("type", lambda e: e["type"]),
            Column("reason", lambda e: e["reason"]),
            Column("message", lambda e: e["message"]),
        ],
        "table",
    )


def _job_facts(job: dict[str, Any]) -> list[tuple[str, Any]]:
    """``describe``'s name: value lines; what explains the job's state (queue position and
    start, why pending, hardware failures) comes right after the state."""
    gpu = job.get("gpu") or {}
    product = gpu.get("mig_profile") or gpu.get("product") or "any GPU"
    explaining: list[tuple[str, Any]] = []
    position = job.get("queue_position")
    if position:
        explaining.append(
            (
                "Queue",
                f"position {position['team']} in team {job['team']}, "
                f"{position['cluster']} in the cluster",
            )
        )
        explaining.append(("Start", position["estimate"]))
    if job.get("advice"):
        explaining.append(("Why pending", job["advice"]))
    if job.get("restart_attempt") or job.get("gpu_hours_lost"):
        avoiding = ", ".join(job.get("excluded_nodes") or []) or "-"
        explaining.append(
            (
                "Hardware",
                f"restart attempt {job.get('restart_attempt', 0)}, avoiding {avoiding}, "
                f"{float(job.get('gpu_hours_lost') or 0):.2f} GPU-hours lost",
            )
        )
    return [
        (
            "Job",
            f"{job['id']} {job['name']} ({job['kind']}, team {job['team']}, owner {job['owner']})",
        ),
        (
            "State",
            f"{job['state']} ({text(job['reason'])})"
            + (", on borrowed quota" if job.get("borrowing") else ""),
        ),
        ("Message", text(job["message"])),
        *explaining,
        ("GPUs", f"{job['gpu_count']} × {product} ({gpu.get('sharing', 'exclusive')})"),
        ("Priority", job["priority"]),
        ("Exit code", text(job.get("exit_code"))),
        ("Evictions", job.get("evictions", 0)),
        *_progress_lines(job),
        ("Submitted", text(job["created_at"])),
        ("Started", text(job["started_at"])),
        ("Finished", text(job["finished_at"])),
    ]


def _progress_lines(job: dict[str, Any]) -> list[tuple[str, Any]]:
    """A training job's progress and time to finish, with how the time was estimated."""
    if job["kind"] != "training":
        return []
    eta = eta_text(job.get("eta_seconds"))
    basis = job.get("eta_basis") or ""
    return [
        ("Progress", progress_text(job) or "not reported yet"),
        ("Time to finish", f"{eta} ({basis})" if eta else basis or "no estimate yet"),
    ]


def _new_lines(before: list[str], now: list[str]) -> list[str]:
    """The lines of ``now`` after the last ones already printed (``before``): a tail window
    slides as a log grows, so find where the printed lines end in it."""
    if not before:
        return now
    anchor = before[-min(5, len(before)) :]
    for start in range(len(now) - len(anchor), -1, -1):
        if now[start : start + len(anchor)] == anchor:
            return now[start + len(anchor) :]
    return now  # the window moved past everything printed: print what is there


@cli.command()
@click.argument("job_id", type=int)
@click.option("-f", "--follow", is_flag=True, help="Keep printing new lines until the job ends.")
@click.option("--pod", help="Only this pod's log (default: every pod of the job).")
@click.option("--tail", type=click.IntRange(1, 5000), default=200, show_default=True)
def logs(job_id: int, follow: bool, pod: str | None, tail: int) -> None:
    """Print the last lines of a job's pod logs.

    \b
    Examples:
      gpuportal logs 42
      gpuportal logs 42 -f --pod resnet50-42-worker-0
    """
    client = api()
    printed: dict[str, list[str]] = defaultdict(list)
    while True:
        answer = client.get(f"jobs/{job_id}/logs/", tail=tail if not printed else 1000)
        pods = [p for p in answer["pods"] if pod is None or p["pod"] == pod]
        if pod is not None and not pods and not follow:
            names = ", ".join(p["pod"] for p in answer["pods"]) or "none"
            raise CliError(f"No pod {pod} in job {job_id} (its pods: {names}).", code=4)
        several = len({p["pod"] for p in pods}) > 1
        for item in pods:
            lines = item["log"].splitlines()
            for line in _new_lines(printed[item["pod"]], lines):
                click.echo(f"[{item['pod']}] {line}" if several else line)
            printed[item["pod"]] = lines
            if not lines and item.get("note") and not follow:
                click.echo(f"[{item['pod']}] ({item['note']})", err=True)
        if not answer["pods"] and answer.get("detail") and not follow:
            click.echo(answer["detail"], err=True)
        if not follow:
            return
        if client.get(f"jobs/{job_id}/")["state"] in FINAL_STATES:
            final = client.get(f"jobs/{job_id}/logs/", tail=1000)
            for item in final["pods"]:
                if pod is None or item["pod"] == pod:
                    lines = item["log"].splitlines()
                    for line in _new_lines(printed[item["pod"]], lines):
                        click.echo(f"[{item['pod']}] {line}" if several else line)
            return
        time.sleep(POLL_SECONDS)


# --- changing --------------------------------------------------------------------------


@cli.command()
@click.argument("job_id", type=int)
def cancel(job_id: int) -> None:
    """Cancel a job that has not finished (yours, or your team's as its lead).

    \b
    Example:
      gpuportal cancel 42
    """
    job = api().post(f"jobs/{job_id}/cancel/")
    click.echo(f"job {job['id']} ({job['name']}) {job['state']}: {job['message']}")


@cli.command()
@click.argument("job_id", type=int)
@click.option("--name", help="The new job's name (default: the same).")
@click.option("--set", "sets", multiple=True, metavar="FIELD=VALUE", help="Change any field.")
@click.option("--wait", is_flag=True, help="Follow the new job to its end.")
def clone(job_id: int, name: str | None, sets: tuple[str, ...], wait: bool) -> None:
    """Submit a copy of a job, with changes.

    \b
    Examples:
      gpuportal clone 42
      gpuportal clone 42 --set gpu.count=8 --set env.LR=3e-4 --wait
    """
    client = api()
    original = client.get(f"jobs/{job_id}/")
    spec = apply_overrides(dict(original["spec"]), sets, name=name)
    job = client.post("jobs/", spec)
    click.echo(
        f"job {job['id']} ({job['name']}) submitted to team {job['team']} as a clone "
        f"of {job_id}: {job['state']}"
    )
    if wait:
        follow(job["id"])


# --- capacity --------------------------------------------------------------------------


@cli.command()
@output_option
def quota(output: str) -> None:
    """Your teams' GPU quotas: nominal, in use, and what is borrowed or lent in a cohort.

    \b
    Example:
      gpuportal quota -o wide
    """
    teams = api().get("teams/")
    rows = [{"team": t, **q} for t in teams for q in t["quotas"]]
    # A team's quota is per cluster: the cluster column when there is more than one.
    several = len({r.get("cluster") for r in rows}) > 1
    show(
        rows,
        [
            Column("team", lambda r: r["team"]["slug"]),
            *([Column("cluster", lambda r: r["cluster"])] if several else []),
            Column("resource", lambda r: r["resource"]),
            Column("nominal", lambda r: r["nominal"]),
            Column("used", lambda r: r["used"]),
            Column("borrowed", lambda r: r["borrowed"]),
            Column("lent", lambda r: r["lent"]),
            Column("cohort", lambda r: r["team"]["cohort"]),
            Column("queued", lambda r: r["team"]["queued_jobs"]),
            Column("borrowing limit", lambda r: r["borrowing_limit"], wide=True),
            Column("lending limit", lambda r: r["lending_limit"], wide=True),
        ],
        output,
        raw=teams,
    )


def gpu_rows(nodes: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Free and total by product, and by MIG profile and shared GPU on each product."""
    totals: dict[tuple[str, str], dict[str, Any]] = {}

    def add(product: str, kind: str, total: int, used: int, node: str) -> None:
        row = totals.setdefault(
            (product, kind), {"product": product, "kind": kind, "total": 0, "free": 0, "nodes": []}
        )
        row["total"] += total
        row["free"] += max(0, total - used)
        row["nodes"].append(node)

    for node in nodes:
        if node["unschedulable"]:
            continue
        product = node["gpu_product"] or "unknown"
        if node["gpus_allocatable"]:
            add(
                product, "whole GPU", node["gpus_allocatable"], node["gpus_allocated"], node["name"]
            )
        for mig in node["mig"]:
            profile = mig["resource"].removeprefix("nvidia.com/mig-")
            add(product, f"MIG {profile}", mig["allocatable"], mig["allocated"], node["name"])
        shared = node.get("shared")
        if shared:
            add(product, "shared GPU", shared["allocatable"], shared["allocated"], node["name"])
    return sorted(totals.values(), key=lambda r: (r["product"], r["kind"]))


@cli.command()
@output_option
def gpus(output: str) -> None:
    """Free and total GPUs in the cluster, by product, MIG profile and shared GPU.

    \b
    Example:
      gpuportal gpus
    """
    nodes = api().get("cluster/nodes/")
    show(
        gpu_rows(nodes),
        [
            Column("product", lambda r: r["product"]),
            Column("kind", lambda r: r["kind"]),
            Column("free", lambda r: r["free"]),
            Column("total", lambda r: r["total"]),
            Column("nodes", lambda r: ", ".join(r["nodes"]), wide=True),
        ],
        output,
        raw=nodes if output in ("json", "yaml") else None,
    )


@cli.command()
@output_option
def launchers(output: str) -> None:
    """Training launchers: which the cluster serves and which a job may use now (--launcher).

    \b
    Example:
      gpuportal launchers
    """
    found = api().get("cluster/launchers/")
    show(
        found,
        [
            Column("name", lambda r: r["name"] + (" (default)" if r["default"] else "")),
            Column("kind", lambda r: r["kind"]),
            Column("served", lambda r: "yes" if r["served"] else "no"),
            Column("offered", lambda r: "yes" if r["offered"] else "no"),
            Column("api", lambda r: r["api"], wide=True),
        ],
        output,
    )


@cli.command()
@output_option
def clusters(output: str) -> None:
    """The clusters a job may run on (--cluster NAME), and whether each takes new work.

    \b
    Example:
      gpuportal clusters
    """
    found = api().get("clusters/")
    show(
        found,
        [
            Column("name", lambda c: c["name"]),
            Column("state", lambda c: c["state"]),
            Column(
                "answers",
                lambda c: (
                    "yes" if not c["unreachable_since"] else f"no, since {c['unreachable_since']}"
                ),
            ),
            Column("region", lambda c: c["region"], wide=True),
        ],
        output,
    )


@cli.command()
@output_option
def templates(output: str) -> None:
    """Job templates you can submit from (--template NAME): yours and your teams'.

    \b
    Example:
      gpuportal templates -o yaml
    """
    found = api().get("templates/")
    show(
        found,
        [
            Column("name", lambda t: f"{t['team']}/{t['name']}" if t["team"] else t["name"]),
            Column("whose", lambda t: f"team {t['team']}" if t["team"] else "yours"),
            Column("fields", lambda t: ", ".join(sorted(t["spec"]))),
            Column("description", lambda t: t["description"], wide=True),
        ],
        output,
    )


cli.add_command(workspace)


def main() -> None:
    try:
        cli.main(standalone_mode=False)
    except CliError as exc:
        exc.show()
        sys.exit(exc.code)
    except click.exceptions.Abort:
        click.echo("Aborted.", err=True)
        sys.exit(130)
    except click.ClickException as exc:
        exc.show()
        sys.exit(exc.exit_code)
