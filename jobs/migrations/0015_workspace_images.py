"""The workspace images a fresh portal offers (admins edit or add their own)."""

from django.db import migrations

from jobs.workspace_images import DEFAULT_IMAGES

def seed(apps, schema_editor):
    WorkspaceImage = apps.get_model("jobs", "WorkspaceImage")
    for values in DEFAULT_IMAGES:
        WorkspaceImage.objects.get_or_create(name=values["name"], defaults=values)


class Migration(migrations.Migration):
    dependencies = [("jobs", "0014_workspaces")]
    operations = [migrations.RunPython(seed, migrations.RunPython.noop)]
