"""Reads for teams, memberships and the GPU catalog."""

from __future__ import annotations

from dataclasses import dataclass

from django.contrib.auth.models import AnonymousUser, User
from django.db import connection
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


# The enabled products and MIG profiles and the settings rows, as rows of one UNION ALL:
# (kind, name, number, number, text); every settings row comes with its id, and the first
# one by id is the settings (as ``.first()``). Plain SQL that SQLite runs too.
_CATALOG_SQL = (
    "SELECT 'product', name, memory_mib, gpus_per_node, '' FROM {products} WHERE enabled "
    "UNION ALL SELECT 'mig', name, max_per_node, 0, '' FROM {mig_profiles} WHERE enabled "
    "UNION ALL SELECT 'settings', shared_gpu_resource, max_shared_per_node, id, "
    "allowed_registries FROM {settings}"
)


def _catalog_sql() -> str:
    # Only the models' own table names are formatted in; nothing comes from a request.
    quote = connection.ops.quote_name
    return _CATALOG_SQL.format(
        products=quote(GpuProduct._meta.db_table),
        mig_profiles=quote(MigProfile._meta.db_table),
        settings=quote(CatalogSettings._meta.db_table),
    )


def catalog_get() -> Catalog:
    """What the cluster offers, read afresh on every call (an admin's change applies to the
    next request).

    Submitting a job reads it on every request: one fixed statement, sent as it is,
    instead of three ORM queries whose compilation cost more CPU than their round trips.
    """
    with connection.cursor() as cursor:
        cursor.execute(_catalog_sql())
        rows = cursor.fetchall()
    product_rows, mig_profiles, found = [], {}, []
    for kind, name, number, other, text in rows:
        if kind == "product":
            product_rows.append(ProductInfo(name, number, other))
        elif kind == "mig":
            mig_profiles[name] = number
        else:
            found.append((other, name, number, text))
    settings_row = CatalogSettings()  # the defaults, until an admin saves the settings
    if found:
        _, settings_row.shared_gpu_resource, settings_row.max_shared_per_node, text = min(found)
        settings_row.allowed_registries = text
    return Catalog(
        products={p.name: p for p in sorted(product_rows, key=lambda p: p.name)},
        mig_profiles=dict(sorted(mig_profiles.items())),
        shared_gpu_resource=settings_row.shared_gpu_resource,
        max_shared_per_node=settings_row.max_shared_per_node,
        allowed_registries=tuple(settings_row.registries),
    )
