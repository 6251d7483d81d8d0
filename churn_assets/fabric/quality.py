"""Data-quality verdicts on a world's warehouse; the asset checks (`assets/warehouse_checks.py`) report them.

- `validate_raw`: Great Expectations 1.x suites on every raw table (its columns and their types, non-null
  ids, non-negative money and counts, well-formed validity intervals), read in place through GX's Postgres
  data source (one table asset per raw table; the expectations run as SQL, no table is pulled into
  pandas). GX is imported inside the function (its import takes seconds) with `GX_ANALYTICS_ENABLED=false`.
- `parity`: the as-of views of `<world>_analytics` against the fold (the truth) on several days: active
  users, assigned licenses (held by active users), open tickets, and monthly spend per cost center plus
  unallocated spend (the single definition of docs/rules.md, "Spend").

Every problem names the entity and the day, so a failed check says what to look at.
"""

from __future__ import annotations

import datetime as dt
import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from churn_assets.fabric.postgres import ident, schema_exists, schema_name, table_columns
from churn_assets.fabric.warehouse_raw import RAW_TABLES
from churn_assets.world.fold import (
    active_users,
    assigned_licenses,
    monthly_spend_by_cost_center,
    open_tickets,
    walk_ledger,
)

if TYPE_CHECKING:
    import psycopg

    from churn_assets.fabric.postgres import TableSpec

# ---------------------------------------------------------------------------------------------------
# Raw layer: Great Expectations
# ---------------------------------------------------------------------------------------------------

# Columns naming the entity of a row (reported with its valid_from when an expectation fails).
ENTITY_COLUMNS: dict[str, tuple[str, ...]] = {
    "vendors": ("vendor_id",), "products": ("product_id",), "cost_centers": ("cost_center_id",),
    "users": ("user_id",), "cost_center_memberships": ("user_id",), "licenses": ("license_id",),
    "assignments": ("license_id",), "prices": ("product_id",), "tickets": ("ticket_id",),
    "consumption": ("consumption_id",), "contracts": ("contract_id",), "world": ("world_id",),
}
MONEY_COLUMNS = ("unit_price_usd", "list_price_usd")
COUNT_COLUMNS = ("sessions", "session_minutes", "api_calls", "event_count")
_GX_URL_VARIABLE = "churnbench_warehouse_url"  # the GX config variable holding the warehouse's SQLAlchemy URL


@dataclass(frozen=True)
class RawProblem:
    table: str
    expectation: str
    column: str
    rows: int  # how many rows fail
    examples: tuple[str, ...]  # "<entity> (valid_from <day>)" of the first failing rows

    def __str__(self) -> str:
        more = f" and {self.rows - len(self.examples)} more" if self.rows > len(self.examples) else ""
        where = f": {', '.join(self.examples)}{more}" if self.examples else ""
        return f"raw.{self.table}.{self.column}: {self.expectation} fails on {self.rows} row(s){where}"


@dataclass(frozen=True)
class RawValidation:
    world_id: str
    problems: tuple[RawProblem, ...]
    evaluated: int  # expectations evaluated
    rows: dict[str, int]

    @property
    def passed(self) -> bool:
        return not self.problems


def _gx_connection_string(conn: psycopg.Connection[Any]) -> str:
    """A SQLAlchemy URL (psycopg 3) for the server and database `conn` is connected to, every libpq parameter
    in its query (`host` may be a Unix-socket folder, which a URL's host part cannot hold)."""
    from sqlalchemy.engine import URL

    params = dict(conn.info.get_parameters())
    if conn.info.password:  # get_parameters() leaves the password out
        params["password"] = conn.info.password
    return URL.create("postgresql+psycopg", query=params).render_as_string(hide_password=False)


def _row_count(conn: psycopg.Connection[Any], schema: str, table: str) -> int:
    from psycopg import sql

    row = conn.execute(sql.SQL("SELECT count(*) FROM {}").format(ident(schema, table))).fetchone()
    return int(row[0]) if row else 0


def raw_expectations(spec: TableSpec) -> list[Any]:
    """The GX expectations of one raw table (GX must be importable; call inside a check)."""
    import great_expectations.expectations as gxe

    names = spec.column_names
    out: list[Any] = [gxe.ExpectTableColumnsToMatchOrderedList(column_list=list(names))]
    for c in spec.columns:  # ids: every *_id column the spec declares NOT NULL (contract_id may be absent)
        if c.name.endswith("_id") and not c.nullable:
            out.append(gxe.ExpectColumnValuesToNotBeNull(column=c.name))
    for c in spec.columns:
        if c.name in MONEY_COLUMNS or c.name in COUNT_COLUMNS:
            out.append(gxe.ExpectColumnValuesToBeBetween(column=c.name, min_value=0))
    if "valid_from" in names:
        out.append(gxe.ExpectColumnValuesToNotBeNull(column="valid_from"))
        # valid_to >= valid_from: a zero-length interval (two changes of one entity on one day) is
        # legitimate and holds on no day (docs/decisions.md); valid_to < valid_from never is.
        out.append(gxe.ExpectColumnPairValuesAToBeGreaterThanB(
            column_A="valid_to", column_B="valid_from", or_equal=True, ignore_row_if="either_value_is_missing"))
    return out


def validate_raw(conn: psycopg.Connection[Any], world_id: str, *, examples: int = 5) -> RawValidation:
    """Run the GX suites on every raw table of a world; also compares column types with the specs."""
    os.environ.setdefault("GX_ANALYTICS_ENABLED", "false")
    import great_expectations as gx

    schema = schema_name(world_id, "raw")
    if not schema_exists(conn, schema):
        problem = RawProblem("*", "schema exists", "*", 0, (f"{schema} is missing",))
        return RawValidation(world_id, (problem,), 0, {})
    existing = table_columns(conn, schema)
    problems: list[RawProblem] = []
    rows: dict[str, int] = {}
    evaluated = 0
    # The URL reaches GX as a config variable: `add_postgres` validates a literal URL as a DSN with a host, which
    # a Unix-socket URL has not, and the datasource's stored config keeps the `${...}` name, not a password.
    context = gx.get_context(mode="ephemeral", runtime_environment={_GX_URL_VARIABLE: _gx_connection_string(conn)})
    _quiet(context)
    datasource = context.data_sources.add_postgres(name="warehouse", connection_string=f"${{{_GX_URL_VARIABLE}}}")
    try:
        for spec in RAW_TABLES.values():
            if spec.name not in existing:
                problems.append(RawProblem(spec.name, "table exists", "*", 0, (f"{schema}.{spec.name} is missing",)))
                continue
            types = {name: sql_type for name, sql_type, _ in existing[spec.name]}
            for c in spec.columns:
                if c.name in types and types[c.name] != c.sql_type:
                    problems.append(RawProblem(spec.name, f"column type is {c.sql_type}", c.name, 0,
                                               (f"found {types[c.name]}",)))
            if [n for n, _, _ in existing[spec.name]] != list(spec.column_names):
                problems.append(RawProblem(spec.name, "columns match the spec", "*", 0,
                                           (f"found {', '.join(n for n, _, _ in existing[spec.name])}",)))
                continue
            rows[spec.name] = _row_count(conn, schema, spec.name)
            batch = (datasource.add_table_asset(name=spec.name, table_name=spec.name, schema_name=schema)
                     .add_batch_definition_whole_table("whole_table"))
            suite = context.suites.add(gx.ExpectationSuite(name=f"raw_{spec.name}"))
            for expectation in raw_expectations(spec):
                suite.add_expectation(expectation)
            definition = context.validation_definitions.add(
                gx.ValidationDefinition(name=f"raw_{spec.name}", data=batch, suite=suite))
            index_columns = [*ENTITY_COLUMNS.get(spec.name, ()),
                             *(["valid_from"] if "valid_from" in spec.column_names else [])]
            result = definition.run(result_format={
                "result_format": "COMPLETE", "unexpected_index_column_names": index_columns,
                "partial_unexpected_count": examples})
            evaluated += len(result.results)
            for r in result.results:
                if r.success:
                    continue
                config = r.expectation_config
                assert config is not None  # a result of `ValidationDefinition.run` carries its expectation
                kwargs = config.kwargs
                column = kwargs.get("column") or (f"{kwargs.get('column_A')}/{kwargs.get('column_B')}"
                                                  if "column_A" in kwargs else "*")
                details = r.result or {}
                failing = details.get("unexpected_index_list") or []
                problems.append(RawProblem(
                    spec.name, config.type, column,
                    int(details.get("unexpected_count") or len(failing)),
                    tuple(_describe_row(spec.name, row) for row in failing[:examples])))
    finally:
        _dispose(datasource)
    return RawValidation(world_id, tuple(problems), evaluated, rows)


def _describe_row(table: str, row: Mapping[str, Any]) -> str:
    entity = "/".join(str(row.get(c)) for c in ENTITY_COLUMNS.get(table, ()))
    day = row.get("valid_from")
    return f"{entity} (valid_from {day})" if day is not None else entity


def _dispose(datasource: Any) -> None:
    """Close the connections GX opened (its datasource and its execution engine each hold a pooled engine)."""
    datasource.get_execution_engine().close()
    datasource.get_engine().dispose()


def _quiet(context: Any) -> None:
    """No progress bars in logs (GX prints one per validation)."""
    try:
        from great_expectations.data_context.types.base import ProgressBarsConfig

        context.variables.progress_bars = ProgressBarsConfig(globally=False)
    except Exception:  # cosmetic only: an API change must not fail the check
        pass


# ---------------------------------------------------------------------------------------------------
# Analytics layer: parity of the as-of views with the fold
# ---------------------------------------------------------------------------------------------------

PARITY_MEASURES: tuple[str, ...] = ("active_users", "assigned_licenses", "open_tickets", "spend_by_cost_center")
UNALLOCATED = "(unallocated)"
CENT = 0.005

Measures = dict[str, Any]  # measure -> set of ids, or dict id -> value


@dataclass(frozen=True)
class Mismatch:
    measure: str
    day: dt.date
    entity: str
    expected: Any  # per the fold (None: the fold does not have it)
    actual: Any  # per the warehouse (None: the warehouse does not have it)

    def __str__(self) -> str:
        if self.expected is None:
            return f"{self.measure} on {self.day}: {self.entity} is in the warehouse, not in the ledger"
        if self.actual is None:
            return f"{self.measure} on {self.day}: {self.entity} is missing from the warehouse"
        return (f"{self.measure} on {self.day}: {self.entity} is {self.actual!r} in the warehouse, "
                f"{self.expected!r} in the ledger")


def parity_days(first: dt.date, last: dt.date, extra: Iterable[dt.date] = ()) -> list[dt.date]:
    """The days a parity check compares: first, middle and last day, plus any `extra` inside them."""
    middle = first + (last - first) // 2
    return sorted({first, middle, last, *(d for d in extra if first <= d <= last)})


def fold_measures(records: Iterable[Mapping[str, Any]], days: Sequence[dt.date],
                  measures: Sequence[str] = PARITY_MEASURES) -> dict[dt.date, Measures]:
    """The parity measures per the fold on each of `days` (one pass over the ledger)."""
    wanted = set(days)
    out: dict[dt.date, Measures] = {}
    for day, state in walk_ledger(records, end=max(days)):
        if day not in wanted:
            continue
        values: Measures = {}
        if "active_users" in measures:
            values["active_users"] = active_users(state, day)
        if "assigned_licenses" in measures:
            values["assigned_licenses"] = assigned_licenses(state, day)
        if "open_tickets" in measures:
            values["open_tickets"] = open_tickets(state, day)
        if "spend_by_cost_center" in measures:
            spend = monthly_spend_by_cost_center(state, day)
            values["spend_by_cost_center"] = {**spend.by_cost_center, UNALLOCATED: spend.unallocated}
        out[day] = values
    return out


# `{schema}` is the world's analytics schema (an `sql.Identifier`); `%(day)s` and `%(unallocated)s` are bound.
_PARITY_SQL: dict[str, str] = {
    "active_users": "SELECT user_id FROM {schema}.active_users_as_of WHERE as_of_day = %(day)s",
    "assigned_licenses": ("SELECT license_id, user_id FROM {schema}.assignments_as_of "
                          "WHERE as_of_day = %(day)s AND holder_active"),
    "open_tickets": "SELECT ticket_id FROM {schema}.tickets_as_of WHERE as_of_day = %(day)s AND is_open",
    "spend_by_cost_center": (
        "SELECT cost_center_id, monthly_spend_usd::float8 FROM {schema}.spend_by_cost_center_as_of "
        "WHERE as_of_day = %(day)s UNION ALL "
        "SELECT %(unallocated)s::text, unallocated_usd::float8 FROM {schema}.spend_summary_as_of "
        "WHERE as_of_day = %(day)s"),
}


def warehouse_measures(conn: psycopg.Connection[Any], world_id: str, days: Sequence[dt.date],
                       measures: Sequence[str] = PARITY_MEASURES) -> dict[dt.date, Measures]:
    """The parity measures read from the world's as-of views on each of `days`."""
    from psycopg import sql

    schema = ident(schema_name(world_id, "analytics"))
    queries = {measure: sql.SQL(_PARITY_SQL[measure]).format(schema=schema) for measure in measures}
    out: dict[dt.date, Measures] = {}
    for day in days:
        values: Measures = {}
        for measure in measures:
            rows = conn.execute(queries[measure], {"day": day, "unallocated": UNALLOCATED}).fetchall()
            if measure in ("active_users", "open_tickets"):
                values[measure] = {r[0] for r in rows}
            else:
                values[measure] = {r[0]: r[1] for r in rows}
        out[day] = values
    return out


def compare_measures(expected: Mapping[dt.date, Measures], actual: Mapping[dt.date, Measures]) -> list[Mismatch]:
    """Every difference, by measure, day and entity (the fold is `expected`)."""
    out: list[Mismatch] = []
    for day in sorted(expected):
        for measure, want in expected[day].items():
            have = actual.get(day, {}).get(measure, set() if isinstance(want, set) else {})
            if isinstance(want, set):
                out += [Mismatch(measure, day, e, e, None) for e in sorted(want - have)]
                out += [Mismatch(measure, day, e, None, e) for e in sorted(have - want)]
                continue
            for entity in sorted(set(want) | set(have)):
                w, h = want.get(entity), have.get(entity)
                if measure == "spend_by_cost_center":
                    w = 0.0 if w is None and entity == UNALLOCATED else w
                    if w is not None and h is not None and abs(w - h) < CENT:
                        continue
                elif w == h:
                    continue
                out.append(Mismatch(measure, day, entity, w, h))
    return out


def parity(conn: psycopg.Connection[Any], world_id: str, records: Iterable[Mapping[str, Any]],
           days: Sequence[dt.date], measures: Sequence[str] = PARITY_MEASURES) -> list[Mismatch]:
    """Compare the as-of views with the fold on `days`; [] when they agree."""
    expected = fold_measures(records, days, measures)
    return compare_measures(expected, warehouse_measures(conn, world_id, days, measures))
