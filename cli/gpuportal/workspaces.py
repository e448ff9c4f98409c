"""``gpuportal workspace``: JupyterLab (or VS Code) with GPUs, opened through the portal."""

from __future__ import annotations

import time
import webbrowser
from typing import Any

import click

from gpuportal import config
from gpuportal.client import Api, CliError
from gpuportal.output import Column, dump, output_option, show
from gpuportal.spec import apply_overrides, load

POLL_SECONDS = 2.0

WORKSPACE_COLUMNS = [
    Column("id", lambda w: w["id"]),
    Column("name", lambda w: w["name"]),
    Column("team", lambda w: w["team"]),
    Column("image", lambda w: w["workspace_image"]),
    Column("gpus", lambda w: w["gpu_count"]),
    Column("state", lambda w: w["state"]),
    Column(
        "stops at",
        lambda w: (w["idle_action_due"] or "")[11:16] + " UTC" if w["idle_action_due"] else "",
    ),
    Column("owner", lambda w: w["owner"], wide=True),
    Column("url", lambda w: w["url"], wide=True),
    Column("why", lambda w: w["message"], wide=True),
]


def _api() -> Api:
    return Api(config.load())


def _absolute(client: Api, workspace: dict[str, Any]) -> str:
    url = str(workspace["url"])
    return url if url.startswith("http") else client.url.rstrip("/") + url


@click.group()
def workspace() -> None:
    """Create, open, stop, start and delete workspaces.

    \b
    Examples:
      gpuportal workspace images
      gpuportal workspace create --team vision --name explore --image jupyter-pytorch \\
          --gpus 1 --set gpu.sharing=shared --set gpu.product=Tesla-T4 --open
      gpuportal workspace ls
      gpuportal workspace stop 42 && gpuportal workspace start 42
    """


@workspace.command("images")
@output_option
def images(output: str) -> None:
    """The workspace images the admins offer."""
    show(
        _api().get("workspace-images/"),
        [
            Column("name", lambda i: i["name"]),
            Column("title", lambda i: i["title"]),
            Column("image", lambda i: i["image"], wide=True),
        ],
        output,
    )


@workspace.command("create")
@click.option("-f", "--file", "path", help="The spec, YAML or JSON (kind workspace implied).")
@click.option("--template", help="Start from this template: NAME or TEAM/NAME.")
@click.option("--team", help="The team it runs in.")
@click.option("--name", help="Its name.")
@click.option("--image", "workspace_image", help="A workspace image (gpuportal workspace images).")
@click.option("--gpus", type=int, help="GPUs (gpu.count; --set gpu.sharing=shared for a slice).")
@click.option("--gpu-product", help="e.g. Tesla-T4 (gpu.product).")
@click.option("--cluster", help="Where it runs (a cluster's name, or any); it stays there.")
@click.option("--set", "sets", multiple=True, metavar="FIELD=VALUE", help="Any field, by path.")
@click.option("--open", "open_it", is_flag=True, help="Wait until it runs, then open it.")
@output_option
def create(
    path: str | None,
    template: str | None,
    workspace_image: str | None,
    sets: tuple[str, ...],
    open_it: bool,
    output: str,
    **fields: Any,
) -> None:
    """Create a workspace; it starts once the team's quota admits it."""
    spec = apply_overrides(load(path) if path else {}, sets, **fields)
    spec.setdefault("kind", "workspace")
    if workspace_image:
        spec["workspace_image"] = workspace_image
    client = _api()
    created = client.post("workspaces/", spec, template=template)
    if output in ("json", "yaml"):
        dump(created, output)
    else:
        click.echo(
            f"workspace {created['id']} ({created['name']}) created in team {created['team']}: "
            f"{created['state']}"
        )
    if open_it:
        _open(client, created["id"])


@workspace.command("ls")
@click.option("--team", help="Only this team's.")
@click.option("--all", "everyone", is_flag=True, help="Everyone's in your teams, not only yours.")
@output_option
def list_workspaces(team: str | None, everyone: bool, output: str) -> None:
    """Your workspaces (not deleted), newest first."""
    client = _api()
    owner = None if everyone else client.get("me/")["username"]
    show(client.get("workspaces/", team=team, owner=owner), WORKSPACE_COLUMNS, output)


def _open(client: Api, workspace_id: int, timeout: float = 600.0) -> None:
    deadline = time.monotonic() + timeout
    while True:
        found = client.get(f"workspaces/{workspace_id}/")
        if found["state"] == "running":
            break
        if found["state"] in ("stopped", "cancelled", "failed", "succeeded"):
            raise CliError(
                f"workspace {workspace_id} is {found['state']}: {found['message']}"
                + (
                    f" (gpuportal workspace start {workspace_id})"
                    if found["state"] == "stopped"
                    else ""
                ),
                code=1,
            )
        if time.monotonic() > deadline:
            raise CliError(f"workspace {workspace_id} is still {found['state']}.", code=1)
        time.sleep(POLL_SECONDS)
    url = _absolute(client, found)
    click.echo(url)
    webbrowser.open(url)


@workspace.command("open")
@click.argument("workspace_id", type=int)
def open_workspace(workspace_id: int) -> None:
    """Print its URL (through the portal) and open it in the browser once it runs."""
    _open(_api(), workspace_id)


@workspace.command("stop")
@click.argument("workspace_id", type=int)
def stop(workspace_id: int) -> None:
    """Stop it: its GPUs are freed, its home folder is kept."""
    done = _api().post(f"workspaces/{workspace_id}/stop/")
    click.echo(f"workspace {done['id']} ({done['name']}): {done['message']}")


@workspace.command("start")
@click.argument("workspace_id", type=int)
@click.option("--open", "open_it", is_flag=True, help="Wait until it runs, then open it.")
def start(workspace_id: int, open_it: bool) -> None:
    """Start a stopped workspace again (it queues for quota like a new one)."""
    client = _api()
    done = client.post(f"workspaces/{workspace_id}/start/")
    click.echo(f"workspace {done['id']} ({done['name']}): {done['state']}")
    if open_it:
        _open(client, workspace_id)


@workspace.command("delete")
@click.argument("workspace_id", type=int)
@click.option("--delete-home", is_flag=True, help="Also delete your home folder in the team.")
@click.option("--yes", is_flag=True, help="Do not ask.")
def delete(workspace_id: int, delete_home: bool, yes: bool) -> None:
    """Delete it; its home folder is kept unless --delete-home."""
    if delete_home and not yes:
        click.confirm("Delete the home folder too (every file in it)?", abort=True)
    done = _api().request(
        "DELETE",
        f"workspaces/{workspace_id}/",
        params={"delete_home": "true"} if delete_home else {},
    )
    kept = "deleted" if delete_home else "kept"
    click.echo(f"workspace {done['id']} ({done['name']}) deleted; home folder {kept}.")
