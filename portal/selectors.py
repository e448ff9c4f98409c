"""Reads for teams, memberships and the GPU catalog."""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

from django.contrib.auth.models import AnonymousUser, User
from django.db import connection
from django.db.models import QuerySet

from portal.db import Read, reads_fetch
from portal.models import (
    ApiToken,
    CatalogSettings,
    GpuProduct,
    GpuQuota,
    Membership,
    MigProfile,
    Team,
)


def teams_for_user(*, user: User | AnonymousUser) -> QuerySet[Team]:
    """Teams whose jobs the user may see: their own; platform admins see every team."""
    if not user.is_authenticated:
        return Team.objects.none()
    if getattr(user, "is_superuser", False):
        return Team.objects.all()
    # No DISTINCT: a user has at most one membership per team (membership_unique_user_team),
    # and DISTINCT over every column costs more to plan than the query costs to run.
    return Team.objects.filter(memberships__user=user)


# The unrevoked token with a digest, joined to its user. Plain SQL that SQLite runs too.
_API_TOKEN_SQL = (
    "SELECT {token_columns}, {user_columns} FROM {token} t "  # noqa: S105 - SQL, not a secret
    "JOIN {user} u ON u.{user_id} = t.{token_user} "
    "WHERE t.{digest} = %s AND t.{revoked_at} IS NULL"
)


@functools.cache
def _api_token_sql() -> str:
    # Only the models' own table and column names are formatted in; nothing from a request.
    quote = connection.ops.quote_name
    token, user = ApiToken._meta, User._meta
    return _API_TOKEN_SQL.format(
        token=quote(token.db_table),
        token_columns=", ".join(f"t.{quote(f.column)}" for f in token.concrete_fields),
        token_user=quote(token.get_field("user").column),
        digest=quote(token.get_field("digest").column),
        revoked_at=quote(token.get_field("revoked_at").column),
        user=quote(user.db_table),
        user_columns=", ".join(f"u.{quote(f.column)}" for f in user.concrete_fields),
        user_id=quote(user.pk.column),
    )


def api_token_by_digest(digest: str) -> ApiToken | None:
    """The unrevoked token with this digest, its user loaded with it (expiry and the user's
    ``is_active`` are the caller's to check).

    Every API request reads it: one fixed statement, whose ORM form (a join, the model's
    default ordering) cost a quarter of a job submission's CPU to compile.
    """
    with connection.cursor() as cursor:
        cursor.execute(_api_token_sql(), [digest])
        row = cursor.fetchone()
    if row is None:
        return None
    token_fields = ApiToken._meta.concrete_fields
    split = len(token_fields)
    token = ApiToken.from_db(connection.alias, [f.attname for f in token_fields], row[:split])
    user = User.from_db(
        connection.alias, [f.attname for f in User._meta.concrete_fields], row[split:]
    )
    ApiToken._meta.get_field("user").set_cached_value(token, user)
    return token


@dataclass(frozen=True)
class TeamQuotas:
    team: Team
    limits: dict[str, int]  # resource → limit, as the team's GpuQuota rows say


# The team by slug with its quota rows (none: one row of NULLs), for a member or for
# everyone (platform admins). Plain SQL that SQLite runs too.
_TEAM_QUOTAS_SQL = (
    "SELECT {team_columns}, q.{resource}, q.{limit} FROM {team} t "
    "LEFT JOIN {quota} q ON q.{quota_team} = t.{team_id} WHERE t.{slug} = %s"
)
_MEMBER_SQL = (
    " AND EXISTS (SELECT 1 FROM {membership} m WHERE m.{membership_team} = t.{team_id} "
    "AND m.{membership_user} = %s)"
)


@functools.cache
def _team_quotas_sql(*, members_only: bool) -> str:
    # Only the models' own table and column names are formatted in; nothing from a request.
    quote = connection.ops.quote_name
    columns = {
        "team": quote(Team._meta.db_table),
        "team_columns": ", ".join(f"t.{quote(f.column)}" for f in Team._meta.concrete_fields),
        "team_id": quote(Team._meta.pk.column),
        "slug": quote(Team._meta.get_field("slug").column),
        "quota": quote(GpuQuota._meta.db_table),
        "quota_team": quote(GpuQuota._meta.get_field("team").column),
        "resource": quote(GpuQuota._meta.get_field("resource").column),
        "limit": quote(GpuQuota._meta.get_field("limit").column),
        "membership": quote(Membership._meta.db_table),
        "membership_team": quote(Membership._meta.get_field("team").column),
        "membership_user": quote(Membership._meta.get_field("user").column),
    }
    sql = _TEAM_QUOTAS_SQL + (_MEMBER_SQL if members_only else "")
    return sql.format(**columns)


def team_quotas_read(*, user: User | AnonymousUser, slug: str) -> Read[TeamQuotas | None]:
    """The team ``slug`` if ``teams_for_user`` holds it, with its quota limits; else None.

    One fixed statement instead of two ORM queries, whose compilation cost more CPU than
    their round trips; a read, so that submitting a job sends it with the others it needs
    (``reads_fetch``). An anonymous user is a member of no team: no row matches.
    """
    members_only = not getattr(user, "is_superuser", False)
    params: list[str | int | None] = [slug, user.pk] if members_only else [slug]
    return Read(_team_quotas_sql(members_only=members_only), params, _team_quotas_decode)


def _team_quotas_decode(rows: list[tuple[Any, ...]]) -> TeamQuotas | None:
    if not rows:
        return None
    fields = Team._meta.concrete_fields
    team = Team.from_db(connection.alias, [f.attname for f in fields], rows[0][: len(fields)])
    limits = {row[-2]: row[-1] for row in rows if row[-2] is not None}
    return TeamQuotas(team=team, limits=limits)


def team_quotas_for_user(*, user: User | AnonymousUser, slug: str) -> TeamQuotas | None:
    """``team_quotas_read`` on its own."""
    if not user.is_authenticated:
        return None
    found: TeamQuotas | None = reads_fetch(team_quotas_read(user=user, slug=slug))[0]
    return found


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


@functools.cache
def _catalog_sql() -> str:
    # Only the models' own table names are formatted in; nothing comes from a request.
    quote = connection.ops.quote_name
    return _CATALOG_SQL.format(
        products=quote(GpuProduct._meta.db_table),
        mig_profiles=quote(MigProfile._meta.db_table),
        settings=quote(CatalogSettings._meta.db_table),
    )


def catalog_read() -> Read[Catalog]:
    """What the cluster offers, read afresh every time (an admin's change applies to the
    next request).

    Submitting a job reads it on every request: one fixed statement, sent as it is,
    instead of three ORM queries whose compilation cost more CPU than their round trips.
    """
    return Read(_catalog_sql(), (), _catalog_decode)


def _catalog_decode(rows: list[tuple[Any, ...]]) -> Catalog:
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


def catalog_get() -> Catalog:
    """``catalog_read`` on its own."""
    catalog: Catalog = reads_fetch(catalog_read())[0]
    return catalog
