"""Load the demo teams, users, GPU catalog and quotas (idempotent; refuses production)."""

from __future__ import annotations

from datetime import date
from decimal import Decimal
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError
from django.db import transaction

from cluster.models import CatalogSettings, Cluster, GpuProduct, MigProfile
from jobs.models import WorkspaceImage
from jobs.workspace_images import DEFAULT_IMAGES
from monitoring.models import GpuPrice
from teams.models import Cohort, Membership, Team
from teams.services import cohort_save, quota_set, team_save

DEMO_PASSWORD = "demo"  # noqa: S105 - the documented demo password, refused in production

PRODUCTS = [
    # (nvidia.com/gpu.product, MiB per GPU, GPUs per node)
    ("NVIDIA-A100-SXM4-80GB", 81920, 8),
    ("NVIDIA-H100-80GB-HBM3", 81559, 8),
    ("Tesla-T4", 15360, 4),
]
# Demo prices per GPU-hour (per slice-hour for MIG) for the GPU-hour reports' cost column.
PRICES = [
    ("NVIDIA-A100-SXM4-80GB", "2.50"),
    ("NVIDIA-H100-80GB-HBM3", "4.00"),
    ("Tesla-T4", "0.35"),
    ("shared:Tesla-T4", "0.35"),
    ("mig-1g.10gb", "0.40"),
    ("mig-2g.20gb", "0.75"),
    ("mig-3g.40gb", "1.20"),
]
PRICES_FROM = date(2026, 1, 1)
MIG_PROFILES = [("1g.10gb", 10, 56), ("2g.20gb", 20, 24), ("3g.40gb", 40, 16)]
TEAMS = [("vision", "Vision"), ("nlp", "NLP"), ("speech", "Speech"), ("robotics", "Robotics")]
# A second cluster's quotas (``--cluster NAME=KUBECONFIG``: make run's H100 and T4 cluster):
# vision and speech have quota there, nlp and robotics not (so not their namespaces either).
SECOND_CLUSTER_QUOTAS = [
    ("vision", "nvidia.com/gpu", 8),
    ("speech", "nvidia.com/gpu.shared", 8),
]
# Teams that lend each other their unused quota; no borrowing or lending limits.
COHORTS = [("research", "Research", ["vision", "robotics"])]
USERS = [
    # (username, team, role, is_staff/superuser)
    ("alice", "vision", Membership.Role.MEMBER, False),
    ("bob", "vision", Membership.Role.LEAD, False),
    ("carol", "nlp", Membership.Role.MEMBER, False),
    ("dave", "robotics", Membership.Role.MEMBER, False),
    ("admin", None, None, True),
]
QUOTAS = [
    ("vision", "nvidia.com/gpu", 16),
    ("vision", "nvidia.com/mig-1g.10gb", 8),
    ("vision", "nvidia.com/gpu.shared", 8),
    ("nlp", "NVIDIA-A100-SXM4-80GB", 8),
    ("speech", "nvidia.com/gpu.shared", 4),
    ("robotics", "nvidia.com/gpu", 8),
]


class Command(BaseCommand):
    help = "Create the demo teams, users (password 'demo'), GPU catalog and quotas."

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument(
            "--cluster",
            action="append",
            default=[],
            metavar="NAME=KUBECONFIG",
            help="Register another cluster, reached by this kubeconfig, with the demo's "
            "quotas there (make run's second local cluster).",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        if settings.PRODUCTION:
            raise CommandError(
                "seed_demo refuses to run with production settings (PORTAL_ENV=production)."
            )
        with transaction.atomic():
            Cluster.first()  # the migration's (a test database may have lost it)
            self._catalog()
            teams = self._teams()
            self._users(teams)
            for slug, resource, limit in QUOTAS:
                quota_set(actor=None, team=teams[slug], resource=resource, limit=limit)
            self._cohorts(teams)
            for given in options["cluster"]:
                self._second_cluster(given, teams)
            # The workspace images the migration offers (a test database may have lost them).
            for values in DEFAULT_IMAGES:
                WorkspaceImage.objects.get_or_create(name=values["name"], defaults=values)
            for product, price in PRICES:
                GpuPrice.objects.get_or_create(
                    product=product,
                    effective_from=PRICES_FROM,
                    defaults={"price_per_gpu_hour": Decimal(price)},
                )
        self.stdout.write(
            self.style.SUCCESS("Demo data ready. Log in at http://127.0.0.1:8000/ with:")
        )
        for username, team, role, staff in USERS:
            what = "platform admin" if staff else f"{role} of {team}"
            self.stdout.write(f"  {username:6} / {DEMO_PASSWORD}   ({what})")

    def _second_cluster(self, given: str, teams: dict[str, Team]) -> None:
        name, _, kubeconfig = given.partition("=")
        if not name or not kubeconfig:
            raise CommandError(f"--cluster {given!r}: give NAME=KUBECONFIG")
        cluster, _ = Cluster.objects.update_or_create(
            name=name,
            defaults={"access": Cluster.Access.KUBECONFIG, "kubeconfig_path": kubeconfig},
        )
        for slug, resource, limit in SECOND_CLUSTER_QUOTAS:
            quota_set(actor=None, team=teams[slug], resource=resource, limit=limit, cluster=cluster)
        self.stdout.write(f"Cluster {name} registered ({kubeconfig}).")

    def _catalog(self) -> None:
        for name, memory_mib, per_node in PRODUCTS:
            GpuProduct.objects.update_or_create(
                name=name, defaults={"memory_mib": memory_mib, "gpus_per_node": per_node}
            )
        for name, memory_gib, per_node in MIG_PROFILES:
            MigProfile.objects.update_or_create(
                name=name, defaults={"memory_gib": memory_gib, "max_per_node": per_node}
            )
        if not CatalogSettings.objects.exists():
            CatalogSettings.objects.create()

    def _teams(self) -> dict[str, Team]:
        teams = {}
        for slug, name in TEAMS:
            team, _ = Team.objects.get_or_create(
                slug=slug, defaults={"name": name, "namespace": f"team-{slug}"}
            )
            teams[slug] = team
        return teams

    def _cohorts(self, teams: dict[str, Team]) -> None:
        for slug, name, members in COHORTS:
            cohort = Cohort.objects.filter(slug=slug).first() or cohort_save(
                actor=None, cohort=Cohort(slug=slug, name=name)
            )
            for member in members:
                team = teams[member]
                if team.cohort_id != cohort.pk:
                    team.cohort = cohort
                    team_save(actor=None, team=team)

    def _users(self, teams: dict[str, Team]) -> None:
        User = get_user_model()
        for username, team, role, staff in USERS:
            user, created = User.objects.get_or_create(
                username=username, defaults={"email": f"{username}@example.com"}
            )
            if created or not user.check_password(DEMO_PASSWORD):
                user.set_password(DEMO_PASSWORD)
            user.is_staff = user.is_superuser = staff
            user.save()
            if team and role:
                Membership.objects.update_or_create(
                    user=user, team=teams[team], defaults={"role": role}
                )
