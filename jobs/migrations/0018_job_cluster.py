"""Jobs carry their cluster: every existing job ran on the first one (``CLUSTER_NAME``)."""

import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models


def first_cluster(apps, schema_editor):
    Cluster = apps.get_model("cluster", "Cluster")
    Job = apps.get_model("jobs", "Job")
    if Job.objects.exists():
        first, _ = Cluster.objects.get_or_create(
            name=settings.CLUSTER_NAME, defaults={"access": "settings"}
        )
        Job.objects.filter(cluster__isnull=True).update(cluster=first)


class Migration(migrations.Migration):
    dependencies = [
        ("cluster", "0006_first_cluster"),
        ("jobs", "0017_workspace_stop_reason"),
    ]

    operations = [
        migrations.AddField(
            model_name="job",
            name="cluster",
            field=models.ForeignKey(
                blank=True,
                null=True,
                on_delete=django.db.models.deletion.PROTECT,
                related_name="jobs",
                to="cluster.cluster",
            ),
        ),
        migrations.RunPython(first_cluster, migrations.RunPython.noop),
    ]
