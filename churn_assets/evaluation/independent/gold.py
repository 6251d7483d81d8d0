"""The independent gold: every template's answer by SQL over `<world>_truth.events`, under any vintage map.

`sql_gold(conn, world_id, template_id, params, anchor, vintage)` answers one task; `SqlGold` answers many
over one connection and remembers answers by the days of the classes a query reads (gold at T and served
gold often share them). Values come back in gold's representation (`template.answer.normalize`): ints,
money and fractions rounded half up to their decimals, sorted id lists, ISO dates, strings, None for no
answer, so they compare with `tasks.gold` and stored results through `template.answer.equal`.

This is the second implementation of gold that `verify-results --independent` and `bench/differential_gold.py`
set against `tasks/gold.py`: it shares no code with the fold or the Python gold (it reads the templates'
declarations and answer types only), so a bug in one shows as a disagreement instead of agreeing with itself.

Vintage maps: each class's fragment reads the ledger at its own served day (`library`); a class missing
from the map is served at the anchor (it cannot matter: a query reads only its template's classes). Windows
end at the anchor whatever the vintage; a "between day1 and day2" template runs its query at the end of each
day with every class served as of min(that day, its served day).
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Mapping
from decimal import Decimal
from typing import TYPE_CHECKING, Any

from churn_assets.errors import UserFacingError
from churn_assets.evaluation.independent.library import Fragment, day_placeholder, library
from churn_assets.fabric.postgres import ident, schema_name
from churn_assets.fabric.truth import EVENTS, truth_head
from churn_assets.tasks.answers import Value
from churn_assets.tasks.templates import Template, template
from churn_assets.world.events import ENTITY_CLASSES

if TYPE_CHECKING:
    import psycopg

Day = dt.date
Params = Mapping[str, Any]


class SqlGoldError(UserFacingError, ValueError):
    """A question the SQL gold cannot answer as asked (no truth layer, a bad vintage map, unknown template)."""


def _day(value: Day | str) -> Day:
    return value if isinstance(value, dt.date) else dt.date.fromisoformat(str(value))


def served_days(vintage: Mapping[str, Day | str] | None, anchor: Day) -> dict[str, Day]:
    """A complete map: given classes at their day, the others at the anchor; no class served after it."""
    given = {c: _day(d) for c, d in (vintage or {}).items()}
    unknown = sorted(set(given) - set(ENTITY_CLASSES))
    if unknown:
        raise SqlGoldError(f"vintage map names unknown classes: {', '.join(unknown)}")
    late = [f"{c}={d}" for c, d in given.items() if d > anchor]
    if late:
        raise SqlGoldError(f"vintage map serves data after the anchor {anchor}: {', '.join(late)}")
    return {c: given.get(c, anchor) for c in ENTITY_CLASSES}


def plain_value(raw: Any) -> Any:
    """A SQL value as the stores and gold write it: ISO days, ints for integral numerics of scale 0, floats
    for other numerics (money)."""
    if isinstance(raw, Decimal):
        exponent = raw.as_tuple().exponent  # 'n'/'N'/'F' for NaN and infinities, which are never integral
        return int(raw) if isinstance(exponent, int) and exponent >= 0 else float(raw)
    if isinstance(raw, dt.date):
        return raw.isoformat()
    return raw


class SqlGold:
    """Gold for many tasks of one world by SQL over its truth schema, on one open connection."""

    def __init__(self, conn: psycopg.Connection[Any], world_id: str) -> None:
        self._events, self.head_hash = truth_events(conn, world_id)
        self.conn, self.world_id = conn, world_id
        self._answers: dict[tuple[Any, ...], Any] = {}
        self.queries = 0  # statements run (a figure for the differential's report)

    def gold(self, t: Template | str, params: Params, *, anchor: Day | str,
             vintage: Mapping[str, Day | str] | None = None) -> Value:
        tmpl = template(t) if isinstance(t, str) else t
        fragment = library().templates.get(tmpl.template_id)
        if fragment is None:
            raise SqlGoldError(f"template {tmpl.template_id} has no SQL query")
        a = _day(anchor)
        days = served_days(vintage, a)
        if fragment.span:
            d1, d2 = _day(params["day1"]), _day(params["day2"])
            end2 = self._point(tmpl, fragment, params, a, {c: min(d, d2) for c, d in days.items()})
            end1 = self._point(tmpl, fragment, params, a, {c: min(d, d1) for c, d in days.items()})
            value = None if end1 is None or end2 is None else end2 - end1
        else:
            value = self._point(tmpl, fragment, params, a, days)
        return tmpl.answer.normalize(value)

    def _point(self, tmpl: Template, fragment: Fragment, params: Params, anchor: Day, days: Mapping[str, Day]
               ) -> Any:
        lib = library()
        read = sorted(lib.classes_read(tmpl.template_id))
        key = (tmpl.template_id, tuple(sorted((k, str(v)) for k, v in params.items())), anchor,
               tuple(days[c] for c in read))
        if key in self._answers:
            return self._answers[key]
        from psycopg import sql

        values: dict[str, Any] = {name: params[name] for name in tmpl.params}
        values["anchor"] = anchor
        if "days" in params:
            n = int(params["days"])
            values["first"] = anchor - dt.timedelta(days=n - 1)  # the last n days, today included
            values["horizon"] = anchor + dt.timedelta(days=n)  # today and the next n days
        values.update({day_placeholder(c): days[c] for c in read})
        text = lib.query_text(tmpl.template_id)
        missing = sorted(set(_placeholders(text)) - set(values) - {"events"})
        if missing:
            raise SqlGoldError(f"template {tmpl.template_id}: its query needs {', '.join(missing)}, which the "
                               "task's parameters do not give")
        query = sql.SQL(text).format(events=self._events, **{k: sql.Literal(v) for k, v in values.items()})
        rows = run_query(self.conn, query, f"template {tmpl.template_id} {dict(params)}", self.world_id)
        row = rows[0] if rows else None
        self.queries += 1
        value = plain_value(row[0]) if row is not None else None
        if isinstance(value, list):
            value = [str(v) for v in value]
        self._answers[key] = value
        return value


def run_query(conn: psycopg.Connection[Any], query: Any, what: str, world_id: str) -> list[tuple[Any, ...]]:
    """Every row of a composed library query, in a transaction of its own."""
    return run_with_columns(conn, query, what, world_id)[1]


def run_with_columns(conn: psycopg.Connection[Any], query: Any, what: str, world_id: str
                     ) -> tuple[list[str], list[tuple[Any, ...]]]:
    """(column names, rows) of a composed library query, in a transaction of its own."""
    import psycopg

    try:
        with conn.transaction():
            # The planner cannot estimate rows filtered by jsonb payload fields and picks nested loops over
            # CTE scans (a spend query took 400 ms); hash joins over these few thousand rows take 6 ms.
            conn.execute("SET LOCAL enable_nestloop = off")
            cursor = conn.execute(query)
            return [c.name for c in cursor.description or ()], cursor.fetchall()
    except (psycopg.DataError, psycopg.ProgrammingError, psycopg.IntegrityError) as e:
        # A payload that does not cast (a truth row edited in the database) or a query bug: name the query.
        raise SqlGoldError(f"{what}: the SQL failed on {world_id}'s truth schema: {str(e).splitlines()[0]}") from e


def truth_events(conn: psycopg.Connection[Any], world_id: str) -> tuple[Any, str | None]:
    """The `events` table of a world's format-2 truth schema (as a SQL identifier) and the ledger head it holds."""
    head = truth_head(conn, world_id)
    if head is None:
        raise SqlGoldError(f"world {world_id} has no truth layer ({schema_name(world_id, 'truth')}); run "
                           f"`churnbench project --world {world_id}`")
    if head.format_version < 2:
        raise SqlGoldError(f"world {world_id} has a format-{head.format_version} ledger: the SQL gold reads "
                           "format-2 payloads only (docs/decisions.md)")
    return ident(schema_name(world_id, "truth"), EVENTS.name), head.head_hash


def _placeholders(text: str) -> list[str]:
    return re.findall(r"\{([a-z0-9_]+)\}", text)


def sql_gold(conn: psycopg.Connection[Any], world_id: str, template_id: str, params: Params,
             anchor: Day | str, vintage: Mapping[str, Day | str] | None = None) -> Value:
    """One task's gold by SQL over the world's truth schema (see `SqlGold` for many)."""
    return SqlGold(conn, world_id).gold(template_id, params, anchor=anchor, vintage=vintage)
