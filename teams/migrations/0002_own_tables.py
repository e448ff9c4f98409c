# The tables that came from the portal app take this app's names (portal_… → teams_…);
# portal 0004 moves their content types.

from django.db import migrations

class Migration(migrations.Migration):

    dependencies = [
        ('teams', '0001_initial'),
        ('portal', '0003_teams_and_catalog_moved'),
    ]

    operations = [
        migrations.AlterModelTable(name='auditlog', table=None),
        migrations.AlterModelTable(name='gpuquota', table=None),
        migrations.AlterModelTable(name='membership', table=None),
        migrations.AlterModelTable(name='team', table=None),
    ]
