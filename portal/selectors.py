"""Reads for teams, memberships and the GPU catalog."""

from __future__ import annotations

from dataclasses import dataclass

from django.contrib.auth.models import AnonymousUser, User
from django.db.models import QuerySet

from portal.models import CatalogSettings, GpuProduct, Membership, MigProfile, Team


def teams_for_user(*, user: User | AnonymousUser) -> QuerySet[Team]:
    """Teams whose jobs the user may see: their own; platform admins see every team."""
    if not user.is_authenticated:
        return Team.objects.none()
    if getattr(user, "is_superuser", False):
        return Team.objects.all()
    # No DISTINCT: a user has at most one membership per team (membership_unique_user_team),
    # and DISTINCT over every column costs more to plan than the query costs to run.
    return Team.objects.filter(memberships__user=user)


@dataclass(frozen=True)
class TeamRole:
    team: Team
    role: str


def team_roles_for_user(*, user: User) -> list[TeamRole]:
    """The user's teams, each with the user's role in it, in slug order: one indexed query.

    Platform admins act as leads of every team (as in ``membership_role``), so they get
    every team with the role ``lead``.
    """
    if user.is_superuser:
        return [TeamRole(team, Membership.Role.LEAD) for team in Team.objects.order_by("slug")]
    memberships = Membership.objects.filter(user=user).select_related("team").order_by("team__slug")
    return [TeamRole(m.team, m.role) for m in memberships]


def membership_role(*, user: User | AnonymousUser, team: Team) -> str | None:
    """``member``, ``lead`` or None. Superusers act as leads of every team."""
    if not user.is_authenticated:
        return None
    if getattr(user, "is_superuser", False):
        return Membership.Role.LEAD
    membership = Membership.objects.filter(user=user, team=team).only("role").first()
    return membership.role if membership else None


@dataclass(frozen=True)
class ProductInfo:
    name: str
    memory_mib: int
    gpus_per_node: int


@dataclass(frozen=True)
class Catalog:
    """What the cluster offers: validation and the form read it."""

    products: dict[str, ProductInfo]
    mig_profiles: dict[str, int]  # profile → most instances on one node
    shared_gpu_resource: str
    max_shared_per_node: int
    allowed_registries: tuple[str, ...] = ()

    @property
    def max_gpus_per_node(self) -> int:
        return max((p.gpus_per_node for p in self.products.values()), default=0)


def catalog_get() -> Catalog:
    settings_row = CatalogSettings.objects.first() or CatalogSettings()
    return Catalog(
        products={
            p.name: ProductInfo(p.name, p.memory_mib, p.gpus_per_node)
            for p in GpuProduct.objects.filter(enabled=True)
        },
        mig_profiles={m.name: m.max_per_node for m in MigProfile.objects.filter(enabled=True)},
        shared_gpu_resource=settings_row.shared_gpu_resource,
        max_shared_per_node=settings_row.max_shared_per_node,
        allowed_registries=tuple(settings_row.registries),
    )
