# Job.team now points at teams.Team (the model moved from the portal app with its table):
# a change of state only, the foreign key in the database is unchanged.

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('jobs', '0003_job_list_order'),
        ('teams', '0001_initial'),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            database_operations=[],
            state_operations=[
                migrations.AlterField(
                    model_name='job',
                    name='team',
                    field=models.ForeignKey(on_delete=django.db.models.deletion.PROTECT, related_name='jobs', to='teams.team'),
                ),
            ],
        ),
    ]
