# The content types of the models that moved to the teams and cluster apps follow them,
# so the admin permissions and history that hang on them are kept.

from django.db import migrations

MOVED = {
    "teams": ("auditlog", "gpuquota", "membership", "team"),
    "cluster": ("catalogsettings", "gpuproduct", "migprofile"),
}


def _move(apps, *, back: bool) -> None:
    content_type = apps.get_model("contenttypes", "ContentType")
    for app, models in MOVED.items():
        source, target = (app, "portal") if back else ("portal", app)
        for model in models:
            if not content_type.objects.filter(app_label=target, model=model).exists():
                content_type.objects.filter(app_label=source, model=model).update(
                    app_label=target
                )


def forwards(apps, schema_editor):
    _move(apps, back=False)


def backwards(apps, schema_editor):
    _move(apps, back=True)


class Migration(migrations.Migration):

    dependencies = [
        ('contenttypes', '0002_remove_content_type_name'),
        ('portal', '0003_teams_and_catalog_moved'),
        ('teams', '0002_own_tables'),
        ('cluster', '0002_own_tables'),
    ]

    operations = [
        migrations.RunPython(forwards, backwards),
    ]
