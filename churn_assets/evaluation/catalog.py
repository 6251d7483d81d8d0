"""The results catalog: one Postgres row per evaluation run, in `churnbench.results_runs`.

The catalog lives in the warehouse database but in a schema of its own (`churnbench`), which is no
world's (world schemas are `<world>_<layer>`, see `fabric/postgres.py`), so dropping a world's schemas
never touches it; `worlds rm` / `gc` delete a world's rows through `delete_world_runs`.

A row is keyed by (experiment hash, code version), exactly as the results folder is. Its `status`:

- `running`  written when a run starts (or resumes from its checkpoint);
- `complete` written only after the results folder is complete (summary.json written last), with the
             summary figures; it changes again only when its folder was removed and the run starts anew;
- `failed`   written when the run raised (an error or an interrupt), with the error.

A process killed outright (SIGKILL, power loss) leaves its row `running`: never `complete`. A completed
results folder whose row is missing or not complete (the catalog was unreachable when it finished) is
recorded complete by the next `evaluate` of the same key, which reads the folder back.

The table is created idempotently (under an advisory lock, so concurrent first runs do not race), and
columns added later are added with `ADD COLUMN IF NOT EXISTS`. psycopg is imported inside the functions.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from churn_assets.errors import UserFacingError
from churn_assets.evaluation.results import (
    STALE_FILE,
    SUMMARY_FILE,
    TASKS_FILE,
    TIMINGS_FILE,
    RunKey,
)
from churn_assets.evaluation.verdicts import VERDICTS

if TYPE_CHECKING:
    import psycopg

    from churn_assets.freshness.scenario import Scenario

CATALOG_SCHEMA = "churnbench"
RUNS_TABLE = "results_runs"
STATUSES = ("running", "complete", "failed")

# (column, type): every column after the key columns; `ensure_catalog` adds any that an older table lacks.
_COLUMNS: tuple[tuple[str, str], ...] = (
    ("world", "text NOT NULL"),
    ("scenario_key", "text NOT NULL"),
    ("arm", "text NOT NULL"),
    ("policy", "text NOT NULL"),
    ("t_prime", "date NOT NULL"),
    ("t", "date NOT NULL"),
    ("agent_id", "text NOT NULL"),
    ("saas_profile", "text NOT NULL"),
    ("status", "text NOT NULL"),
    ("tasks", "integer"),
    ("accuracy", "double precision"),
    *((v, "integer") for v in VERDICTS),
    ("stale_answers", "integer"),
    ("exposure", "integer"),
    ("prediction", "double precision"),
    ("mean_cost_units", "double precision"),
    ("mean_latency_ms", "double precision"),
    ("results_dir", "text NOT NULL"),
    ("tasks_file", "text"),
    ("stale_file", "text"),
    ("summary_file", "text"),
    ("timings_file", "text"),
    ("error", "text"),
    ("attempts", "integer NOT NULL DEFAULT 1"),
    ("started_at", "timestamptz NOT NULL DEFAULT now()"),
    ("finished_at", "timestamptz"),
)


class CatalogError(UserFacingError):
    """A catalog lookup that matched no run, or more than one experiment."""


@dataclass(frozen=True)
class CatalogRun:
    """One row of the catalog."""

    run_id: int
    experiment_hash: str
    code_version: str
    world: str
    scenario_key: str
    arm: str
    policy: str
    t_prime: dt.date
    t: dt.date
    agent_id: str
    saas_profile: str
    status: str
    tasks: int | None
    accuracy: float | None
    verdicts: dict[str, int | None]
    stale_answers: int | None
    exposure: int | None
    prediction: float | None
    mean_cost_units: float | None
    mean_latency_ms: float | None
    results_dir: str
    files: dict[str, str | None]
    error: str | None
    attempts: int
    started_at: dt.datetime
    finished_at: dt.datetime | None

    @property
    def folder_name(self) -> str:
        return f"{self.experiment_hash}__{self.code_version}"


_SELECT = ("run_id, experiment_hash, code_version, " + ", ".join(c for c, _ in _COLUMNS))


def _row(values: tuple[Any, ...]) -> CatalogRun:
    d = dict(zip(["run_id", "experiment_hash", "code_version", *(c for c, _ in _COLUMNS)], values, strict=True))
    return CatalogRun(
        run_id=d["run_id"], experiment_hash=d["experiment_hash"], code_version=d["code_version"], world=d["world"],
        scenario_key=d["scenario_key"], arm=d["arm"], policy=d["policy"], t_prime=d["t_prime"], t=d["t"],
        agent_id=d["agent_id"], saas_profile=d["saas_profile"], status=d["status"], tasks=d["tasks"],
        accuracy=d["accuracy"], verdicts={v: d[v] for v in VERDICTS}, stale_answers=d["stale_answers"],
        exposure=d["exposure"], prediction=d["prediction"], mean_cost_units=d["mean_cost_units"],
        mean_latency_ms=d["mean_latency_ms"], results_dir=d["results_dir"],
        files={"tasks": d["tasks_file"], "stale": d["stale_file"], "summary": d["summary_file"],
               "timings": d["timings_file"]},
        error=d["error"], attempts=d["attempts"], started_at=d["started_at"], finished_at=d["finished_at"])


def _table() -> Any:
    from churn_assets.fabric.postgres import ident

    return ident(CATALOG_SCHEMA, RUNS_TABLE)


def catalog_exists(conn: psycopg.Connection[Any]) -> bool:
    row = conn.execute("SELECT to_regclass(%s)", (f'"{CATALOG_SCHEMA}"."{RUNS_TABLE}"',)).fetchone()
    return row is not None and row[0] is not None


def ensure_catalog(conn: psycopg.Connection[Any]) -> None:
    """Create the schema and table when missing, and add columns a newer version defines (idempotent)."""
    from psycopg import sql

    from churn_assets.fabric.postgres import ident

    with conn.transaction():
        conn.execute("SELECT pg_advisory_xact_lock(hashtext('churnbench results catalog'))")
        conn.execute(sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(ident(CATALOG_SCHEMA)))
        conn.execute(sql.SQL(
            "CREATE TABLE IF NOT EXISTS {} (run_id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, "
            "experiment_hash text NOT NULL, code_version text NOT NULL, {}, "
            "UNIQUE (experiment_hash, code_version), "
            "CHECK (status IN ({})), "
            "CHECK (status <> 'complete' OR (finished_at IS NOT NULL AND tasks IS NOT NULL)))").format(
                _table(), sql.SQL(", ").join(sql.SQL(f"{{}} {t}").format(ident(c)) for c, t in _COLUMNS),
                sql.SQL(", ").join(sql.Literal(s) for s in STATUSES)))
        for column, sql_type in _COLUMNS:
            # NOT NULL columns added to an older table would need a default; only nullable ones get added.
            if "NOT NULL" not in sql_type or "DEFAULT" in sql_type:
                conn.execute(sql.SQL(f"ALTER TABLE {{}} ADD COLUMN IF NOT EXISTS {{}} {sql_type}").format(
                    _table(), ident(column)))
        conn.execute(sql.SQL("CREATE INDEX IF NOT EXISTS {} ON {} (world, scenario_key)").format(
            ident(f"{RUNS_TABLE}_world_ix"), _table()))
        conn.execute(sql.SQL("COMMENT ON TABLE {} IS {}").format(_table(), sql.Literal(
            "Every evaluation run: identity (experiment hash, code version, scenario), status "
            "(running/complete/failed), summary figures and its results files.")))


def catalog_worlds(conn: psycopg.Connection[Any]) -> set[str]:
    """Worlds with at least one catalog row (for `worlds rm` / `gc`)."""
    from psycopg import sql

    if not catalog_exists(conn):
        return set()
    return {r[0] for r in conn.execute(sql.SQL("SELECT DISTINCT world FROM {}").format(_table()))}


def delete_world_runs(conn: psycopg.Connection[Any], world: str) -> int:
    """Delete every catalog row of a world; returns how many there were."""
    from psycopg import sql

    if not catalog_exists(conn):
        return 0
    cur = conn.execute(sql.SQL("DELETE FROM {} WHERE world = %s").format(_table()), (world,))
    return cur.rowcount


def _files(run_dir: Path) -> dict[str, str]:
    return {"tasks_file": str(run_dir / TASKS_FILE), "stale_file": str(run_dir / STALE_FILE),
            "summary_file": str(run_dir / SUMMARY_FILE), "timings_file": str(run_dir / TIMINGS_FILE)}


def _figures(summary: Mapping[str, Any], timings: Mapping[str, Any]) -> dict[str, Any]:
    verdicts = summary.get("verdicts") or {}
    return {
        "tasks": summary.get("tasks"), "accuracy": summary.get("accuracy"),
        **{v: verdicts.get(v, 0) for v in VERDICTS},
        "stale_answers": summary.get("stale_answers"), "exposure": summary.get("exposure"),
        "prediction": summary.get("prediction"), "mean_cost_units": summary.get("mean_cost_units"),
        "mean_latency_ms": timings.get("mean_latency_ms"),
    }


class RunCatalog:
    """The catalog of one warehouse database (a libpq URL); each call opens a short connection."""

    def __init__(self, url: str) -> None:
        self.url = url
        self._ready = False

    def _connect(self) -> Any:
        from churn_assets.fabric.postgres import connection

        return connection(self.url, autocommit=True)

    def _ensure(self, conn: psycopg.Connection[Any]) -> None:
        if not self._ready:
            ensure_catalog(conn)
            self._ready = True

    # -- writes (the runner) ---------------------------------------------------------------------------

    def _upsert(self, scenario: Scenario, key: RunKey, run_dir: Path, values: Mapping[str, Any],
                on_conflict: str, where: str = "") -> None:
        from psycopg import sql

        from churn_assets.fabric.postgres import ident

        row = {"experiment_hash": key.experiment_hash, "code_version": key.code_version, "world": key.world,
               "scenario_key": key.scenario_key, "arm": scenario.arm, "policy": scenario.policy_id,
               "t_prime": scenario.t_prime, "t": scenario.t, "agent_id": scenario.agent_id,
               "saas_profile": scenario.saas_profile,
               "results_dir": str(run_dir), **values}
        cols = list(row)
        statement = sql.SQL("INSERT INTO {} ({}) VALUES ({}) ON CONFLICT (experiment_hash, code_version) "
                            "DO UPDATE SET {}{}").format(
            _table(), sql.SQL(", ").join(ident(c) for c in cols), sql.SQL(", ").join(sql.Placeholder() * len(cols)),
            sql.SQL(on_conflict), sql.SQL(where))
        with self._connect() as conn:
            self._ensure(conn)
            conn.execute(statement, [row[c] for c in cols])

    def start(self, scenario: Scenario, key: RunKey, run_dir: Path) -> None:
        """Record a run as `running` (a resumed run counts one more attempt). The runner starts a run only when
        its results folder is not complete, so a `complete` row is reset too: its folder was removed, and the
        row must not keep figures that no folder holds any more."""
        self._upsert(scenario, key, run_dir, {"status": "running"},
                     "status = 'running', error = NULL, finished_at = NULL, started_at = now(), "
                     "attempts = results_runs.attempts + 1, results_dir = EXCLUDED.results_dir")

    def complete(self, scenario: Scenario, key: RunKey, run_dir: Path, summary: Mapping[str, Any],
                 timings: Mapping[str, Any]) -> None:
        """Record a run `complete` with its figures (call only once its results folder is complete).
        Idempotent: a row that is complete already keeps its figures and timestamps."""
        figures = {**_figures(summary, timings), **_files(run_dir)}
        sets = ", ".join(f"{c} = EXCLUDED.{c}" for c in [*figures, "results_dir"])
        self._upsert(scenario, key, run_dir, {"status": "complete", "finished_at": dt.datetime.now(dt.UTC),
                                          **figures},
                     f"status = 'complete', error = NULL, finished_at = EXCLUDED.finished_at, {sets}",
                     " WHERE results_runs.status <> 'complete'")

    def fail(self, key: RunKey, error: str) -> None:
        """Record a run `failed` (an error or an interrupt); a complete row is left as it is."""
        from psycopg import sql

        with self._connect() as conn:
            self._ensure(conn)
            conn.execute(sql.SQL("UPDATE {} SET status = 'failed', error = %s, finished_at = now() "
                                 "WHERE experiment_hash = %s AND code_version = %s AND status <> 'complete'")
                         .format(_table()), (error[:2000], key.experiment_hash, key.code_version))

    # -- reads (the CLI) -------------------------------------------------------------------------------

    def runs(self, world: str | None = None) -> list[CatalogRun]:
        """Every run (of one world), oldest first."""
        from psycopg import sql

        with self._connect() as conn:
            if not catalog_exists(conn):
                return []
            query = sql.SQL(f"SELECT {_SELECT} FROM {{}}" + (" WHERE world = %s" if world else "")
                            + " ORDER BY started_at, run_id").format(_table())
            return [_row(r) for r in conn.execute(query, (world,) if world else ())]

    def find(self, ref: str) -> list[CatalogRun]:
        """Runs a reference names: a run id, a scenario key, `<experiment hash>__<code version>`, or an
        experiment hash prefix (at least 4 hex digits). Newest first."""
        from psycopg import sql

        ref = ref.strip()
        with self._connect() as conn:
            if not catalog_exists(conn):
                return []
            clauses, args = ["scenario_key = %s", "experiment_hash || '__' || code_version = %s"], [ref, ref]
            if ref.isdigit():
                clauses.append("run_id = %s")
                args.append(int(ref))
            if len(ref) >= 4 and all(ch in "0123456789abcdef" for ch in ref.lower()):
                clauses.append("experiment_hash LIKE %s")
                args.append(ref.lower() + "%")
            query = sql.SQL(f"SELECT {_SELECT} FROM {{}} WHERE " + " OR ".join(clauses)
                            + " ORDER BY started_at DESC, run_id DESC").format(_table())
            return [_row(r) for r in conn.execute(query, args)]

    def resolve(self, ref: str) -> tuple[CatalogRun, list[CatalogRun]]:
        """The one run `ref` names, and the other code versions of the same experiment (newest first).

        Several code versions of one experiment resolve to the newest (name one with
        `<experiment hash>__<code version>`); a reference matching several experiments is refused, listed.
        """
        found = self.find(ref)
        if not found:
            raise CatalogError(f"no run {ref!r} in the results catalog (see `churnbench results list`)")
        by_id = [r for r in found if str(r.run_id) == ref]
        if by_id:
            return by_id[0], [r for r in found if r is not by_id[0] and r.experiment_hash == by_id[0].experiment_hash]
        experiments = {r.experiment_hash for r in found}
        if len(experiments) > 1:
            listed = "\n  ".join(f"{r.run_id}  {r.experiment_hash}__{r.code_version}  {r.scenario_key}"
                                 for r in found)
            raise CatalogError(f"{ref!r} names {len(experiments)} experiments; use a longer hash prefix or a "
                               f"run id:\n  {listed}")
        return found[0], found[1:]
