# The tables that came from the portal app take this app's names (portal_team →
# cluster_…), and their content types (which admin permissions and history hang on) move
# with them.

from django.db import migrations

MODELS = ("catalogsettings", "gpuproduct", "migprofile")


def content_types_follow(apps, schema_editor, *, source="portal", target="cluster"):
    content_type = apps.get_model("contenttypes", "ContentType")
    for model in MODELS:
        if not content_type.objects.filter(app_label=target, model=model).exists():
            content_type.objects.filter(app_label=source, model=model).update(app_label=target)


def content_types_return(apps, schema_editor):
    content_types_follow(apps, schema_editor, source="cluster", target="portal")


class Migration(migrations.Migration):

    dependencies = [
        ('contenttypes', '0002_remove_content_type_name'),
        ('cluster', '0001_initial'),
        ('portal', '0003_teams_and_catalog_moved'),
    ]

    operations = [
        migrations.AlterModelTable(name='catalogsettings', table=None),
        migrations.AlterModelTable(name='gpuproduct', table=None),
        migrations.AlterModelTable(name='migprofile', table=None),
        migrations.RunPython(content_types_follow, content_types_return),
    ]
