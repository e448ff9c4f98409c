"""Reads for API tokens."""

from __future__ import annotations

import functools

from django.contrib.auth.models import User
from django.db import connection

from portal.models import ApiToken

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
