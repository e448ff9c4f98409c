# The GPU catalog (products, MIG profiles, settings) moves here from the portal app,
# keeping its tables and rows: this migration takes the models into the cluster app's
# state only (no SQL); portal 0003 drops them from the portal's state; cluster 0002
# renames the tables.

import django.core.validators
from django.db import migrations, models


class Migration(migrations.Migration):

    initial = True

    dependencies = [
        ('portal', '0002_allowed_registries'),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            database_operations=[],
            state_operations=[
                migrations.CreateModel(
                    name='CatalogSettings',
                    fields=[
                        ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                        ('shared_gpu_resource', models.CharField(choices=[('nvidia.com/gpu.shared', 'nvidia.com/gpu.shared (time-slicing with renameByDefault)'), ('nvidia.com/gpu', 'nvidia.com/gpu (time-slicing without renameByDefault)')], default='nvidia.com/gpu.shared', max_length=40)),
                        ('max_shared_per_node', models.PositiveIntegerField(default=16, help_text='Most time-sliced GPU replicas on one node.')),
                        ('allowed_registries', models.TextField(blank=True, help_text='Image registries jobs may pull from, one per line (e.g. nvcr.io); empty allows any registry.')),
                    ],
                    options={
                        'db_table': 'portal_catalogsettings',
                        'verbose_name': 'catalog settings',
                        'verbose_name_plural': 'catalog settings',
                    },
                ),
                migrations.CreateModel(
                    name='GpuProduct',
                    fields=[
                        ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                        ('name', models.CharField(max_length=100, unique=True)),
                        ('memory_mib', models.PositiveIntegerField(help_text='Framebuffer per GPU, MiB.')),
                        ('gpus_per_node', models.PositiveIntegerField(help_text='Most GPUs of this product on one node.')),
                        ('description', models.CharField(blank=True, max_length=200)),
                        ('enabled', models.BooleanField(default=True)),
                    ],
                    options={
                        'db_table': 'portal_gpuproduct',
                        'verbose_name': 'GPU product',
                        'ordering': ['name'],
                    },
                ),
                migrations.CreateModel(
                    name='MigProfile',
                    fields=[
                        ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                        ('name', models.CharField(max_length=30, unique=True, validators=[django.core.validators.RegexValidator('^[1-7]g\\.[0-9]+gb$', 'A MIG profile looks like 1g.10gb.')])),
                        ('memory_gib', models.PositiveIntegerField()),
                        ('max_per_node', models.PositiveIntegerField(default=56, help_text='Most instances of this profile on one node.')),
                        ('enabled', models.BooleanField(default=True)),
                    ],
                    options={
                        'db_table': 'portal_migprofile',
                        'verbose_name': 'MIG profile',
                        'ordering': ['name'],
                    },
                ),
            ],
        ),
    ]
