"""The results catalog: one Postgres row per evaluation run, in `churnbench.results_runs`.

The catalog lives in the warehouse database, in a schema of its own (`catalog_schema.py`: its tables and their
Alembic migrations); `worlds rm` / `gc` and `sweep rm` delete a world's or a sweep's rows through
`catalog_removal.py`.

A row is keyed by (experiment hash, code version, repeat), exactly as the results folder is (a repeat r > 0
of `--repeats K` is the folder `...__rep<r>`, `results.RunKey`; a single run is repeat 0). Its `status`:

- `running`  written when a run starts (or resumes from its checkpoint), with no figures (an earlier attempt's
             are cleared: no figure stands without the summary it came from) and the Dagster run evaluating it;
- `complete` written only after the results folder is complete (summary.json written last), with the
             summary figures and the folder's seal (`seals.py`: a MAC of each results file under the state
             folder's key, which the database never holds; one entry per folder name, so a retry's seal joins
             the first folder's); it changes again only when its folder was removed and the run starts anew;
- `failed`   written when the run raised (an error or an interrupt), with the error and no figures.

A process killed outright (SIGKILL, power loss) leaves its row `running`: never `complete`; the next command
finds it (`running_rows`), sees that its process is gone, and records it `failed` (`mark_dead`; the Dagster run the
row names is recorded failed too), or `complete` when its folder was completed before the kill
(`mark_dead_complete`; `orchestration/dead_runs.py`). A completed
results folder whose row is missing or not complete (the catalog was unreachable when it finished) is
recorded complete by the next `evaluate` of the same key, which reads the folder back.

Statements are SQLAlchemy Core on the tables `catalog_schema` describes; each call brings the catalog to the
newest revision first (`ensure_catalog`, once per `RunCatalog`). SQLAlchemy is imported inside the functions:
importing this module costs nothing.

Beside the runs, `churnbench.results_experiments` holds one summary per experiment, code version and number of
repeats (`record_experiment`, written once all K repeats are complete: `evaluation/repeats.py`).
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from churn_assets.evaluation.catalog_schema import (
    FILE_COLUMNS,
    HEAD_REVISION,
    LOCK_KEY,
    CatalogError,
    catalog_state,
    ensure_catalog,
    experiments_table,
    runs_table,
)
from churn_assets.evaluation.results import (
    IDENTITY_VERSION,
    STALE_FILE,
    SUMMARY_FILE,
    TASKS_FILE,
    TIMINGS_FILE,
    RunKey,
    parse_folder_name,
)
from churn_assets.evaluation.seals import seal_folder
from churn_assets.evaluation.verdicts import VERDICTS
from churn_assets.fabric.postgres import connect
from churn_assets.freshness.scenario import ScenarioKeyError, parse_scenario_key
from churn_assets.seal_key import SealKey, current_key

if TYPE_CHECKING:
    import sqlalchemy as sa

    from churn_assets.freshness.scenario import Scenario


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
    degenerate_exposure: int | None
    prediction: float | None
    mean_cost_units: float | None
    mean_latency_ms: float | None
    results_dir: str
    files: dict[str, str | None]
    error: str | None
    attempts: int
    started_at: dt.datetime
    finished_at: dt.datetime | None
    identity_version: int = 1
    repeat: int = 0
    seal: dict[str, dict[str, Any]] | None = None  # results folder name -> its seal (`seals.py`)
    dagster_run_id: str | None = None  # the Dagster run of the latest attempt (None: not run by `eval_run`)

    @property
    def older_identity(self) -> bool:
        """Whether the run's experiment hash covers less than today's identity (it is shown, never reused)."""
        return self.identity_version < IDENTITY_VERSION

    @property
    def folder_name(self) -> str:
        return f"{self.experiment_hash}__{self.code_version}"

    @property
    def retry(self) -> int:
        """Which retry of its transport failures the row's results folder is (0: the first answering)."""
        base, _repeat, retry = parse_folder_name(Path(self.results_dir).name)
        return retry if base == self.folder_name else 0


@dataclass(frozen=True)
class CatalogExperiment:
    """One row of the experiments table: the summary of an experiment's first `repeats` repeats."""

    experiment_hash: str
    code_version: str
    repeats: int
    scenario_key: str
    summary: dict[str, Any]
    recorded_at: dt.datetime


def _row(m: sa.RowMapping) -> CatalogRun:
    return CatalogRun(
        run_id=m["run_id"], experiment_hash=m["experiment_hash"], code_version=m["code_version"], world=m["world"],
        scenario_key=m["scenario_key"], arm=m["arm"], policy=m["policy"], t_prime=m["t_prime"], t=m["t"],
        agent_id=m["agent_id"], saas_profile=m["saas_profile"], status=m["status"], tasks=m["tasks"],
        accuracy=m["accuracy"], verdicts={v: m[v] for v in VERDICTS}, stale_answers=m["stale_answers"],
        exposure=m["exposure"], degenerate_exposure=m["degenerate_exposure"], prediction=m["prediction"],
        mean_cost_units=m["mean_cost_units"],
        mean_latency_ms=m["mean_latency_ms"], results_dir=m["results_dir"],
        files={name: m[column] for name, column in FILE_COLUMNS.items()},
        error=m["error"], attempts=m["attempts"], started_at=m["started_at"], finished_at=m["finished_at"],
        identity_version=m["identity_version"], repeat=m["repeat"], seal=m["seal"],
        dagster_run_id=m["dagster_run_id"])


# ---------------------------------------------------------------------------------------------------
# The catalog of one database
# ---------------------------------------------------------------------------------------------------


def _files(run_dir: Path) -> dict[str, str]:
    return {"tasks_file": str(run_dir / TASKS_FILE), "stale_file": str(run_dir / STALE_FILE),
            "summary_file": str(run_dir / SUMMARY_FILE), "timings_file": str(run_dir / TIMINGS_FILE)}


FIGURES = ("tasks", "accuracy", *VERDICTS, "stale_answers", "exposure", "degenerate_exposure", "prediction",
           "mean_cost_units", "mean_latency_ms")  # a row's figures: set only while it is `complete`
NO_FIGURES: dict[str, Any] = dict.fromkeys(FIGURES)


def _figures(summary: Mapping[str, Any], timings: Mapping[str, Any]) -> dict[str, Any]:
    verdicts = summary.get("verdicts") or {}
    return {
        "tasks": summary.get("tasks"), "accuracy": summary.get("accuracy"),
        **{v: verdicts.get(v, 0) for v in VERDICTS},
        "stale_answers": summary.get("stale_answers"), "exposure": summary.get("exposure"),
        "degenerate_exposure": summary.get("degenerate_exposure"),
        "prediction": summary.get("prediction"), "mean_cost_units": summary.get("mean_cost_units"),
        "mean_latency_ms": timings.get("mean_latency_ms"),
    }


def _scenario_columns(scenario: Scenario, key: RunKey) -> dict[str, Any]:
    return {"world": key.world, "scenario_key": key.scenario_key, "arm": scenario.arm, "policy": scenario.policy_id,
            "t_prime": scenario.t_prime, "t": scenario.t, "agent_id": scenario.agent_id,
            "saas_profile": scenario.saas_profile}


def _merged_seal(current: Any, new: Any) -> Any:
    """`current || new` in SQL: a row's folder seals with this folder's replaced or added."""
    import sqlalchemy as sa

    return sa.func.coalesce(current, sa.cast(sa.literal("{}"), current.type)).op("||")(new)


def _renamed_path(path: str, old: str, new: str) -> str:
    """`path` with its folder named `old` (the scenario-key folder of a results path) renamed `new`."""
    parts = list(Path(path).parts)
    if old in parts:
        i = len(parts) - 1 - parts[::-1].index(old)
        parts[i] = new
    return str(Path(*parts))


def durable_connection(url: str) -> Any:
    """A psycopg connection whose commits wait for their WAL flush. The embedded cluster commits asynchronously
    (decision 26: Dagster's event log and the rebuildable stores lose at most the last fraction of a second on a
    crash), but a catalog row is a record of what ran, not a projection of the ledger: a run's start (its attempt)
    committed just before Postgres was killed was lost that way (decision 309). The catalog writes a few rows
    per run, so the flush costs nothing measurable."""
    conn = connect(url)
    conn.execute("SET synchronous_commit = on")
    conn.commit()
    return conn


class RunCatalog:
    """The catalog of one warehouse database (a libpq URL); each call opens a short connection."""

    def __init__(self, url: str, seal_key: SealKey | None = None) -> None:
        self.url = url
        self._seal_key = seal_key
        self._ready = False
        self._engine: sa.Engine | None = None

    def _connect(self) -> sa.Connection:
        if self._engine is None:
            import sqlalchemy as sa
            from sqlalchemy.pool import NullPool

            # psycopg opens the libpq URL itself, as every other reader does (Unix-socket URLs, the connect
            # timeout); NullPool closes each connection after its call, so nothing outlives it (forked
            # Dagster runs included).
            url = self.url
            self._engine = sa.create_engine("postgresql+psycopg://", creator=lambda: durable_connection(url),
                                            poolclass=NullPool)
        return self._engine.connect()

    def _ensure(self, conn: sa.Connection, *, create: bool) -> bool:
        """Whether the catalog exists, at the newest revision once this returns. Reads (`create=False`) do not
        create a missing catalog; both adopt or upgrade an existing one, whose columns they need."""
        if self._ready:
            return True
        table_exists, revision = catalog_state(conn)
        if not table_exists and not create:
            conn.rollback()
            return False
        if not table_exists or revision != HEAD_REVISION:
            ensure_catalog(conn)
        self._ready = True
        return True

    # -- writes (the runner) ---------------------------------------------------------------------------

    def _seal(self, run_dir: Path) -> dict[str, Any]:
        """The folder's seal under the state folder's key (`seals.py`), read from its file on first use: the key is
        never in the database this catalog writes to."""
        if self._seal_key is None:
            self._seal_key = current_key()
        return seal_folder(run_dir, self._seal_key)

    def _write(self, statement: sa.Executable) -> None:
        with self._connect() as conn:
            self._ensure(conn, create=True)
            conn.execute(statement)
            conn.commit()

    def _upsert(self, scenario: Scenario, key: RunKey, run_dir: Path, values: Mapping[str, Any],
                on_conflict: Callable[[Any], dict[str, Any]], where: Any = None) -> None:
        """INSERT ... ON CONFLICT (experiment_hash, code_version, repeat) DO UPDATE SET `on_conflict(excluded)`."""
        from sqlalchemy.dialects.postgresql import insert

        t = runs_table()
        row = {"experiment_hash": key.experiment_hash, "code_version": key.code_version, "repeat": key.repeat,
               **_scenario_columns(scenario, key), "identity_version": IDENTITY_VERSION,
               "results_dir": str(run_dir), **values}
        statement = insert(t).values(row)
        self._write(statement.on_conflict_do_update(
            index_elements=[t.c.experiment_hash, t.c.code_version, t.c.repeat], set_=on_conflict(statement.excluded),
            where=where))

    def start(self, scenario: Scenario, key: RunKey, run_dir: Path, dagster_run_id: str | None = None) -> None:
        """Record a run as `running` (a resumed run counts one more attempt), with no figures. The runner starts a
        run only when its results folder is not complete, so a `complete` row is reset too: its folder was
        removed (or a retry writes a new one), and the row must not keep figures that no folder holds any more.
        `dagster_run_id`: the Dagster run evaluating it, recorded failed with the row if its process dies."""
        import sqlalchemy as sa

        t = runs_table()
        self._upsert(scenario, key, run_dir, {"status": "running", "dagster_run_id": dagster_run_id},
                     lambda excluded: {
            "status": "running", "error": None, "finished_at": None, "started_at": sa.func.now(),
            "attempts": t.c.attempts + 1, "results_dir": excluded.results_dir,
            "dagster_run_id": excluded.dagster_run_id, **NO_FIGURES})

    def complete(self, scenario: Scenario, key: RunKey, run_dir: Path, summary: Mapping[str, Any],
                 timings: Mapping[str, Any]) -> None:
        """Record a run `complete` with its figures (call only once its results folder is complete).
        Idempotent: a row that is complete already keeps its figures and timestamps."""
        t = runs_table()
        figures = {**_figures(summary, timings), **_files(run_dir)}
        self._upsert(scenario, key, run_dir,
                     {"status": "complete", "finished_at": dt.datetime.now(dt.UTC), **figures,
                      "seal": {run_dir.name: self._seal(run_dir)}},
                     lambda excluded: {"status": "complete", "error": None, "finished_at": excluded.finished_at,
                                       **{c: excluded[c] for c in [*figures, "results_dir"]},
                                       "seal": _merged_seal(t.c.seal, excluded.seal)},
                     where=t.c.status != "complete")

    def fail(self, key: RunKey, error: str) -> None:
        """Record a run `failed` (an error or an interrupt); a complete row is left as it is."""
        import sqlalchemy as sa

        t = runs_table()
        self._write(sa.update(t)
                    .where(t.c.experiment_hash == key.experiment_hash, t.c.code_version == key.code_version,
                           t.c.repeat == key.repeat, t.c.status != "complete")
                    .values(status="failed", error=error[:2000], finished_at=sa.func.now(), **NO_FIGURES))

    def record_experiment(self, scenario: Scenario, key: RunKey, summary: Mapping[str, Any]) -> None:
        """Record (or replace) the summary of an experiment's first `summary["repeats"]` repeats, all complete
        (`evaluation/repeats.py`); `key`: any repeat's key (its experiment hash and code version are used)."""
        from sqlalchemy.dialects.postgresql import insert

        e = experiments_table()
        interval = summary.get("accuracy_interval_90") or [None, None]
        k = str(summary["repeats"])
        figures = {"tasks": summary["tasks"], "accuracy_mean": summary.get("accuracy_mean"),
                   "accuracy_low": interval[0], "accuracy_high": interval[1],
                   "pass_hat_k": (summary.get("pass_hat_k") or {}).get(k),
                   "pass_at_k": (summary.get("pass_at_k") or {}).get(k), "stability": summary.get("stability"),
                   "stale_answers_mean": summary.get("stale_answers_mean"),
                   "summary": json.loads(json.dumps(dict(summary), default=str))}
        statement = insert(e).values({"experiment_hash": key.experiment_hash, "code_version": key.code_version,
                                      "repeats": int(summary["repeats"]), **_scenario_columns(scenario, key),
                                      **figures})
        self._write(statement.on_conflict_do_update(
            index_elements=[e.c.experiment_hash, e.c.code_version, e.c.repeats],
            set_={**{c: statement.excluded[c] for c in figures}, "recorded_at": statement.excluded.recorded_at}))

    def experiments(self, experiment_hash: str, code_version: str) -> list[CatalogExperiment]:
        """The recorded summaries of one experiment and code version, most repeats first."""
        import sqlalchemy as sa

        e = experiments_table()
        query = (sa.select(e).where(e.c.experiment_hash == experiment_hash, e.c.code_version == code_version)
                 .order_by(e.c.repeats.desc()))
        with self._connect() as conn:
            if not self._ensure(conn, create=False):
                return []
            return [CatalogExperiment(m["experiment_hash"], m["code_version"], m["repeats"], m["scenario_key"],
                                      dict(m["summary"]), m["recorded_at"])
                    for m in (r._mapping for r in conn.execute(query))]

    def repeats_of(self, run: CatalogRun) -> list[CatalogRun]:
        """Every repeat row of `run`'s experiment and code version (`run` included), by repeat."""
        import sqlalchemy as sa

        t = runs_table()
        return self._read(sa.select(t).where(t.c.experiment_hash == run.experiment_hash,
                                             t.c.code_version == run.code_version).order_by(t.c.repeat))

    # -- runs whose process is gone (`orchestration/dead_runs.py`) ------------------------------------------

    def running_rows(self) -> list[CatalogRun]:
        """Every row recorded `running` (a run in progress, or one whose process was killed)."""
        import sqlalchemy as sa

        t = runs_table()
        return self._read(sa.select(t).where(t.c.status == "running").order_by(t.c.run_id))

    def _still_running(self, run: CatalogRun) -> Any:
        """The row of `run` while it is still the attempt that was read (a run started again meanwhile, which
        counts one more attempt, is left alone)."""
        t = runs_table()
        return (t.c.experiment_hash == run.experiment_hash, t.c.code_version == run.code_version,
                t.c.repeat == run.repeat, t.c.status == "running", t.c.attempts == run.attempts)

    def mark_dead(self, run: CatalogRun, error: str) -> bool:
        """Record `failed` a `running` row whose process is gone; False when the row moved on meanwhile."""
        import sqlalchemy as sa

        t = runs_table()
        with self._connect() as conn:
            self._ensure(conn, create=True)
            count = conn.execute(sa.update(t).where(*self._still_running(run))
                                 .values(status="failed", error=error[:2000], finished_at=sa.func.now(),
                                         **NO_FIGURES)).rowcount
            conn.commit()
        return bool(count)

    def mark_dead_complete(self, run: CatalogRun, summary: Mapping[str, Any], timings: Mapping[str, Any]) -> bool:
        """Record `complete` a `running` row whose process is gone after its folder was completed (killed between
        summary.json and the catalog write)."""
        import sqlalchemy as sa

        t = runs_table()
        run_dir = Path(run.results_dir)
        with self._connect() as conn:
            self._ensure(conn, create=True)
            count = conn.execute(sa.update(t).where(*self._still_running(run)).values(
                status="complete", error=None, finished_at=sa.func.now(), **_figures(summary, timings),
                **_files(run_dir),
                seal=_merged_seal(t.c.seal, sa.literal({run_dir.name: self._seal(run_dir)}, t.c.seal.type)))).rowcount
            conn.commit()
        return bool(count)

    def set_seal(self, run_id: int, seal: Mapping[str, Any]) -> None:
        """Replace a row's seals (folder name -> seal): `churnbench migrate` re-seals a run whose plain seal of
        before issue 46 (SHA-256) still holds."""
        import sqlalchemy as sa

        t = runs_table()
        self._write(sa.update(t).where(t.c.run_id == run_id).values(seal=dict(seal)))

    # -- the key rename of `churnbench migrate` (issue 20) ---------------------------------------------

    def rename_scenario_keys(self, rename: Callable[[str], str | None]) -> int:
        """Give every row whose `rename(scenario key)` is a new key that key, and point its results folder and
        files at the folder renamed with it (`<world>/<key>/<run>`); returns the rows changed. One transaction,
        under the catalog's lock; a missing catalog has nothing to rename. The experiment hash and code version
        (the row's identity) never change: a scenario key is not part of the experiment."""
        import sqlalchemy as sa

        t = runs_table()
        with self._connect() as conn:
            if not self._ensure(conn, create=False):
                return 0
            conn.execute(sa.select(sa.func.pg_advisory_xact_lock(sa.func.hashtext(LOCK_KEY))))
            rows = conn.execute(sa.select(t.c.run_id, t.c.scenario_key, t.c.results_dir,
                                          *(t.c[c] for c in FILE_COLUMNS.values()))).all()
            changed = 0
            for row in rows:
                m = row._mapping
                new = rename(m["scenario_key"])
                if new is None or new == m["scenario_key"]:
                    continue
                values = {"scenario_key": new, "results_dir": _renamed_path(m["results_dir"], m["scenario_key"], new)}
                values |= {c: _renamed_path(m[c], m["scenario_key"], new) for c in FILE_COLUMNS.values()
                           if m[c] is not None}
                conn.execute(sa.update(t).where(t.c.run_id == m["run_id"]).values(**values))
                changed += 1
            conn.commit()
            return changed

    # -- reads (the CLI) -------------------------------------------------------------------------------

    def _read(self, statement: sa.Select[Any]) -> list[CatalogRun]:
        with self._connect() as conn:
            if not self._ensure(conn, create=False):
                return []
            return [_row(r._mapping) for r in conn.execute(statement)]

    def runs(self, world: str | None = None) -> list[CatalogRun]:
        """Every run (of one world), oldest first."""
        import sqlalchemy as sa

        t = runs_table()
        query = sa.select(t)
        if world:
            query = query.where(t.c.world == world)
        return self._read(query.order_by(t.c.started_at, t.c.run_id))

    def get(self, key: RunKey) -> CatalogRun | None:
        """The row of a run key (experiment hash, code version and repeat), or None."""
        import sqlalchemy as sa

        t = runs_table()
        rows = self._read(sa.select(t).where(t.c.experiment_hash == key.experiment_hash,
                                             t.c.code_version == key.code_version, t.c.repeat == key.repeat))
        return rows[0] if rows else None

    def find(self, ref: str) -> list[CatalogRun]:
        """Runs a reference names: a run id, a scenario key (today's form or the form before issue 20: either
        finds rows stored under either), `<experiment hash>__<code version>` (a results folder's name: with
        `__rep<r>`, that repeat's), a results folder's path, or an experiment hash prefix (at least 4 hex
        digits). Newest first; a scenario key or hash prefix finds every repeat."""
        import sqlalchemy as sa

        t = runs_table()
        ref = ref.strip()
        if "/" in ref:  # a results folder, as `churnbench run` prints it: its name is the run's identity
            ref = Path(ref.rstrip("/")).name
        # A retry's folder names the experiment (and repeat) it retried; a repeat's folder, that repeat.
        ref, repeat, _retry = parse_folder_name(ref)
        keys = [ref]
        try:
            parts = parse_scenario_key(ref)
            keys = [str(parts), parts.legacy]
        except ScenarioKeyError:
            pass  # not a scenario key: the ref is matched as a run id or run folder name below
        clauses = [t.c.scenario_key.in_(keys),
                   sa.and_(t.c.experiment_hash.concat("__").concat(t.c.code_version) == ref, t.c.repeat == repeat)]
        if ref.isdigit():
            clauses.append(t.c.run_id == int(ref))
        if len(ref) >= 4 and all(ch in "0123456789abcdef" for ch in ref.lower()):
            clauses.append(t.c.experiment_hash.startswith(ref.lower(), autoescape=True))
        return self._read(sa.select(t).where(sa.or_(*clauses)).order_by(t.c.started_at.desc(), t.c.run_id.desc()))

    def resolve(self, ref: str) -> tuple[CatalogRun, list[CatalogRun]]:
        """The one run `ref` names, and the other code versions of the same experiment (their repeat 0 rows,
        newest first).

        Several code versions of one experiment resolve to the newest (name one with
        `<experiment hash>__<code version>`), and several repeats to repeat 0 unless `ref` is a run id or a
        repeat's folder; a reference matching several experiments is refused, listed.
        """
        found = self.find(ref)
        if not found:
            raise CatalogError(f"no run {ref!r} in the results catalog (see `churnbench results list`)")
        by_id = [r for r in found if str(r.run_id) == ref]
        if by_id:
            chosen = by_id[0]
        else:
            experiments = {r.experiment_hash for r in found}
            if len(experiments) > 1:
                listed = "\n  ".join(f"{r.run_id}  {r.experiment_hash}__{r.code_version}  {r.scenario_key}"
                                     + (f"  (repeat {r.repeat})" if r.repeat else "") for r in found)
                raise CatalogError(f"{ref!r} names {len(experiments)} experiments; use a longer hash prefix or a "
                                   f"run id:\n  {listed}")
            chosen = min((r for r in found if r.code_version == found[0].code_version), key=lambda r: r.repeat)
        return chosen, [r for r in self.find(chosen.experiment_hash)
                        if r.code_version != chosen.code_version and r.repeat == 0]
