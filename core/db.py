"""Database helpers shared by the apps' services."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from django.db import connection
from django.db.models import Field, Model, sql

T = TypeVar("T")


@dataclass(frozen=True)
class Read(Generic[T]):
    """A read statement and how its rows become a value: ``reads_fetch`` sends several."""

    sql: str
    params: Sequence[Any]
    decode: Callable[[list[tuple[Any, ...]]], T]


def reads_fetch(*reads: Read[Any]) -> list[Any]:
    """Each read's value, in order, its statements sent in one round trip on PostgreSQL.

    Django's psycopg cursors bind parameters on the client and send a query with the
    simple protocol, which carries several statements at once; PostgreSQL runs them as
    one implicit transaction, so they also read one snapshot. Each statement costs a round
    trip elsewhere (SQLite runs one statement at a time, and so does PostgreSQL with
    ``server_side_binding``). A statement must not hold a ``;`` of its own.
    """
    one_trip = (
        len(reads) > 1
        and connection.vendor == "postgresql"
        and connection.settings_dict["OPTIONS"].get("server_side_binding") is not True
    )
    results: list[list[tuple[Any, ...]]] = []
    with connection.cursor() as cursor:
        if one_trip:
            cursor.execute("; ".join(r.sql for r in reads), [p for r in reads for p in r.params])
            results.append(cursor.fetchall())
            while cursor.nextset():
                results.append(cursor.fetchall())
        else:
            for read in reads:
                cursor.execute(read.sql, read.params)
                results.append(cursor.fetchall())
    if len(results) != len(reads):
        raise RuntimeError(f"{len(reads)} statements sent, {len(results)} results read")
    return [read.decode(rows) for read, rows in zip(reads, results, strict=True)]


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


# The INSERT text of a model and its columns, by whether its id is set: the same for every
# row whose values are plain (no expressions), so compiling it once saves most of an
# insert's CPU.
_INSERT_TEXT: dict[tuple[type[Model], bool], tuple[str, list[Field[Any, Any]]]] = {}


def _insert_fields(obj: Model) -> list[Field[Any, Any]]:
    """The columns ``save(force_insert=True)`` writes: the id only when it is set."""
    meta = obj._meta
    pk_set = obj.pk is not None
    return [
        f
        for f in meta.local_concrete_fields
        if not f.generated and (pk_set or f is not meta.auto_field)
    ]


def _insert_sql(obj: Model) -> tuple[str, tuple[Any, ...]]:
    """``INSERT … RETURNING <pk>`` for one row, with the columns ``save()`` would write.

    The text comes from Django's INSERT compiler, once per model: it depends on the row's
    values only when one is an expression (``db_default``, ``Now()``) or a field words its
    own placeholder (``BinaryField``), and such rows are compiled every time. The values
    are prepared as the compiler prepares plain ones: ``pre_save``, then
    ``get_db_prep_save``.
    """
    key = (type(obj), obj.pk is not None)
    cached = _INSERT_TEXT.get(key)
    if cached is not None:
        text, fields = cached
        values = [field.pre_save(obj, add=True) for field in fields]
        if not any(_is_expression(value) for value in values):
            params = tuple(
                field.get_db_prep_save(value, connection=connection)
                for field, value in zip(fields, values, strict=True)
            )
            if not any(_is_expression(param) for param in params):
                return text, params
    fields = _insert_fields(obj)
    query = sql.InsertQuery(type(obj))
    query.insert_values(fields, [obj])
    compiler = query.get_compiler(using=connection.alias)
    compiler.returning_fields = [obj._meta.pk]
    ((insert_sql, insert_params),) = compiler.as_sql()
    plain = not any(
        hasattr(field, "get_placeholder") or _is_expression(getattr(obj, field.attname))
        for field in fields
    )
    if plain:
        _INSERT_TEXT[key] = (insert_sql, fields)
    return insert_sql, insert_params


def _is_expression(value: object) -> bool:
    return hasattr(value, "resolve_expression") or hasattr(value, "as_sql")
