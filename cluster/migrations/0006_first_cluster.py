"""The portal's first cluster, from its settings: an installation that had one cluster (one
KUBECONFIG, one PROMETHEUS_URL) keeps reaching it exactly as before."""

from django.conf import settings
from django.db import migrations


def first_cluster(apps, schema_editor):
    Cluster = apps.get_model("cluster", "Cluster")
    if not Cluster.objects.exists():
        Cluster.objects.create(name=settings.CLUSTER_NAME, access="settings")


class Migration(migrations.Migration):
    dependencies = [("cluster", "0005_cluster")]

    operations = [migrations.RunPython(first_cluster, migrations.RunPython.noop)]
