# Teams, memberships, quotas and the audit log moved to the teams app, the GPU catalog to
# the cluster app, each with its table and rows: the portal app lets go of their state
# (no SQL). The portal keeps the API tokens.

from django.db import migrations


class Migration(migrations.Migration):

    dependencies = [
        ('portal', '0002_allowed_registries'),
        ('teams', '0001_initial'),
        ('cluster', '0001_initial'),
        ('jobs', '0004_team_moved_to_teams'),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            database_operations=[],
            state_operations=[
                migrations.DeleteModel(name='GpuQuota'),
                migrations.RemoveConstraint(model_name='membership', name='membership_unique_user_team'),
                migrations.RemoveField(model_name='membership', name='team'),
                migrations.DeleteModel(name='Team'),
                migrations.DeleteModel(name='Membership'),
                migrations.DeleteModel(name='AuditLog'),
                migrations.DeleteModel(name='CatalogSettings'),
                migrations.DeleteModel(name='GpuProduct'),
                migrations.DeleteModel(name='MigProfile'),
            ],
        ),
    ]
