"""The teams and the GPU catalog moved out of the portal app with their rows: an existing
installation migrates without losing a team, a quota, a job's team or a permission."""

from __future__ import annotations

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

pytestmark = pytest.mark.django_db(transaction=True)

BEFORE = [
    ("portal", "0002_allowed_registries"),
    ("jobs", "0003_job_list_order"),
    ("contenttypes", "0002_remove_content_type_name"),
    ("auth", "0012_alter_user_first_name_max_length"),
]


def test_an_installation_from_before_the_move_keeps_its_rows_and_permissions() -> None:
    # Given a database as the portal app left it: a team, a member, a quota, a product,
    # a job of the team, and a platform admin's group allowed to change quotas
    executor = MigrationExecutor(connection)
    executor.migrate(BEFORE)
    old = executor.loader.project_state(BEFORE).apps
    user = old.get_model("auth", "User").objects.create(username="lead")
    team = old.get_model("portal", "Team").objects.create(
        name="Vision", slug="vision", namespace="team-vision"
    )
    old.get_model("portal", "Membership").objects.create(user=user, team=team, role="lead")
    quota = old.get_model("portal", "GpuQuota")
    quota.objects.create(team=team, resource="nvidia.com/gpu", limit=8)
    old.get_model("portal", "GpuProduct").objects.create(
        name="NVIDIA-A100-SXM4-80GB", memory_mib=81920, gpus_per_node=8
    )
    old.get_model("jobs", "Job").objects.create(
        team=team, owner=user, name="train", kind="training", spec={}, manifests=[], demand={}
    )
    # (the content type may exist already: taking the migrations back moved it home)
    content_type, _ = old.get_model("contenttypes", "ContentType").objects.get_or_create(
        app_label="portal", model="gpuquota"
    )
    permission, _ = old.get_model("auth", "Permission").objects.get_or_create(
        codename="change_gpuquota",
        content_type=content_type,
        defaults={"name": "Can change GPU quota"},
    )
    group = old.get_model("auth", "Group").objects.create(name="platform")
    group.permissions.add(permission)

    # When it migrates to the new layout
    executor = MigrationExecutor(connection)
    executor.loader.build_graph()
    executor.migrate(executor.loader.graph.leaf_nodes())

    # Then every row is where the new apps look for it
    from django.contrib.auth.models import Group

    from cluster.models import GpuProduct
    from jobs.models import Job
    from teams.models import GpuQuota, Membership, Team

    moved = Team.objects.get(slug="vision")
    assert Membership.objects.get(team=moved).role == "lead"
    assert GpuQuota.objects.get(team=moved).limit == 8
    assert GpuProduct.objects.get().gpus_per_node == 8
    assert Job.objects.get(name="train").team == moved
    # and the group's permission now names the teams app's model
    (kept,) = Group.objects.get(name="platform").permissions.all()
    assert (kept.content_type.app_label, kept.content_type.model) == ("teams", "gpuquota")
    assert kept.codename == "change_gpuquota"
