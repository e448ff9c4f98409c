# The tables that came from the portal app take this app's names (portal_team →
# teams_…), and their content types (which admin permissions and history hang on) move
# with them.

from django.db import migrations

MODELS = ("auditlog", "gpuquota", "membership", "team")


def content_types_follow(apps, schema_editor, *, source="portal", target="teams"):
    content_type = apps.get_model("contenttypes", "ContentType")
    for model in MODELS:
        if not content_type.objects.filter(app_label=target, model=model).exists():
            content_type.objects.filter(app_label=source, model=model).update(app_label=target)


def content_types_return(apps, schema_editor):
    content_types_follow(apps, schema_editor, source="teams", target="portal")


class Migration(migrations.Migration):

    dependencies = [
        ('contenttypes', '0002_remove_content_type_name'),
        ('teams', '0001_initial'),
        ('portal', '0003_teams_and_catalog_moved'),
    ]

    operations = [
        migrations.AlterModelTable(name='auditlog', table=None),
        migrations.AlterModelTable(name='gpuquota', table=None),
        migrations.AlterModelTable(name='membership', table=None),
        migrations.AlterModelTable(name='team', table=None),
        migrations.RunPython(content_types_follow, content_types_return),
    ]
