"""Database helpers shared by the apps' services."""

from __future__ import annotations

from typing import Any

from django.db import connection
from django.db.models import Model, sql


def rows_insert(*objs: Model) -> None:
    """INSERT new model instances as ``obj.save(force_insert=True)`` would, in one statement.

    Each row is compiled by Django's own INSERT compiler (defaults, ``auto_now_add``, JSON
    encoding: what ``save()`` sends). On PostgreSQL the INSERTs are the data-modifying WITH
    clauses of one statement, so the rows cost one round trip instead of one each; a row
    may refer to another of the same call, since Django's foreign keys are checked at
    commit. Elsewhere (the SQLite demo) each object is saved in turn.

    ``save()`` overrides and pre/post-save signals do not run: use it only for models
    that have none.
    """
    if connection.vendor != "postgresql" or len(objs) < 2:
        for obj in objs:
            obj.save(force_insert=True)
        return
    clauses: list[str] = []
    params: list[Any] = []
    for index, obj in enumerate(objs):
        # As save(): refuses a relation to an unsaved object (one with no id yet).
        obj._prepare_related_fields_for_save(operation_name="save")  # type: ignore[attr-defined]
        insert_sql, insert_params = _insert_sql(obj)
        clauses.append(f"r{index} AS ({insert_sql})")
        params.extend(insert_params)
    # Only Django's compiled INSERTs and the clauses' own names are formatted in.
    pks = ", ".join(f"(SELECT * FROM r{index})" for index in range(len(objs)))  # noqa: S608
    with connection.cursor() as cursor:
        cursor.execute(f"WITH {', '.join(clauses)} SELECT {pks}", params)
        row = cursor.fetchone()
    for obj, pk in zip(objs, row, strict=True):
        obj.pk = pk
        obj._state.adding = False
        obj._state.db = connection.alias


def _insert_sql(obj: Model) -> tuple[str, tuple[Any, ...]]:
    """``INSERT … RETURNING <pk>`` for one row, with the columns ``save()`` would write."""
    meta = obj._meta
    pk_set = obj.pk is not None
    fields = [
        f
        for f in meta.local_concrete_fields
        if not f.generated and (pk_set or f is not meta.auto_field)
    ]
    query = sql.InsertQuery(type(obj))
    query.insert_values(fields, [obj])
    compiler = query.get_compiler(using=connection.alias)
    compiler.returning_fields = [meta.pk]
    ((insert_sql, insert_params),) = compiler.as_sql()
    return insert_sql, insert_params
