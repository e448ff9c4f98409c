"""code-server is offered: the proxy signs in to it and its heartbeat is read as activity.
The row the earlier default made (off, with a note saying why) is brought up to today's
default; a row an admin has edited since is left as it is."""

from django.db import migrations

from jobs.workspace_images import DEFAULT_IMAGES

OLD_DESCRIPTION = (
    "Coder's code-server. Off until the proxy signs in to code-server "
    'for its owner (docs/workspaces.md, "Limits").'
)
OLD_IMAGE = "docker.io/codercom/code-server:4.106.3"


def offer(apps, schema_editor):
    WorkspaceImage = apps.get_model("jobs", "WorkspaceImage")
    today = next(v for v in DEFAULT_IMAGES if v["name"] == "code-server")
    WorkspaceImage.objects.filter(
        name="code-server", enabled=False, description=OLD_DESCRIPTION, image=OLD_IMAGE
    ).update(enabled=True, description=today["description"])


class Migration(migrations.Migration):
    dependencies = [("jobs", "0015_workspace_images")]
    operations = [migrations.RunPython(offer, migrations.RunPython.noop)]
