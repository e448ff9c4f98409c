# The teams, memberships, quotas and audit log move here from the portal app, keeping
# their tables and rows: this migration takes them into the teams app's state only (no
# SQL); portal 0003 drops them from the portal's state; teams 0002 renames the tables.

import django.core.validators
import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models


class Migration(migrations.Migration):

    initial = True

    dependencies = [
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
        ('portal', '0002_allowed_registries'),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            database_operations=[],
            state_operations=[
                migrations.CreateModel(
                    name='AuditLog',
                    fields=[
                        ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                        ('action', models.CharField(db_index=True, max_length=50)),
                        ('target_type', models.CharField(blank=True, max_length=50)),
                        ('target', models.CharField(blank=True, max_length=200)),
                        ('changes', models.JSONField(blank=True, default=dict)),
                        ('ip_address', models.GenericIPAddressField(blank=True, null=True)),
                        ('created_at', models.DateTimeField(auto_now_add=True, db_index=True)),
                        ('actor', models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.SET_NULL, to=settings.AUTH_USER_MODEL)),
                    ],
                    options={
                        'db_table': 'portal_auditlog',
                        'verbose_name': 'audit log entry',
                        'verbose_name_plural': 'audit log',
                        'ordering': ['-created_at', '-id'],
                    },
                ),
                migrations.CreateModel(
                    name='Membership',
                    fields=[
                        ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                        ('role', models.CharField(choices=[('member', 'Member'), ('lead', 'Lead')], default='member', max_length=10)),
                        ('created_at', models.DateTimeField(auto_now_add=True)),
                        ('user', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='memberships', to=settings.AUTH_USER_MODEL)),
                    ],
                    options={
                        'db_table': 'portal_membership',
                        'ordering': ['team__slug', 'user__username'],
                    },
                ),
                migrations.CreateModel(
                    name='Team',
                    fields=[
                        ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                        ('name', models.CharField(max_length=100, unique=True)),
                        ('slug', models.SlugField(max_length=40, unique=True, validators=[django.core.validators.RegexValidator('^[a-z0-9]([-a-z0-9]*[a-z0-9])?$', "Use lower-case letters, digits and '-', starting and ending with a letter or digit.")])),
                        ('namespace', models.CharField(blank=True, help_text="Kubernetes namespace of the team's jobs; team-<slug> when left empty.", max_length=63, unique=True, validators=[django.core.validators.RegexValidator('^[a-z0-9]([-a-z0-9]*[a-z0-9])?$', "Use lower-case letters, digits and '-', starting and ending with a letter or digit.")])),
                        ('description', models.TextField(blank=True)),
                        ('created_at', models.DateTimeField(auto_now_add=True)),
                        ('members', models.ManyToManyField(related_name='teams', through='teams.Membership', to=settings.AUTH_USER_MODEL)),
                    ],
                    options={
                        'db_table': 'portal_team',
                        'ordering': ['slug'],
                    },
                ),
                migrations.AddField(
                    model_name='membership',
                    name='team',
                    field=models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='memberships', to='teams.team'),
                ),
                migrations.CreateModel(
                    name='GpuQuota',
                    fields=[
                        ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                        ('resource', models.CharField(max_length=100)),
                        ('limit', models.PositiveIntegerField(help_text='Whole number: GPUs, slices, cores or GiB.')),
                        ('updated_at', models.DateTimeField(auto_now=True)),
                        ('team', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='quotas', to='teams.team')),
                    ],
                    options={
                        'db_table': 'portal_gpuquota',
                        'verbose_name': 'GPU quota',
                        'ordering': ['team__slug', 'resource'],
                    },
                ),
                migrations.AddConstraint(
                    model_name='membership',
                    constraint=models.UniqueConstraint(fields=('user', 'team'), name='membership_unique_user_team'),
                ),
                migrations.AddConstraint(
                    model_name='gpuquota',
                    constraint=models.UniqueConstraint(fields=('team', 'resource'), name='quota_unique_team_resource'),
                ),
            ],
        ),
    ]
