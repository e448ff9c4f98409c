# The tables that came from the portal app take this app's names (portal_… → cluster_…);
# portal 0004 moves their content types.

from django.db import migrations

class Migration(migrations.Migration):

    dependencies = [
        ('cluster', '0001_initial'),
        ('portal', '0003_teams_and_catalog_moved'),
    ]

    operations = [
        migrations.AlterModelTable(name='catalogsettings', table=None),
        migrations.AlterModelTable(name='gpuproduct', table=None),
        migrations.AlterModelTable(name='migprofile', table=None),
    ]
