"""Secrets stay secret (issue 22, item 17): after a small evaluation that used every credential (the world's
Postgres arm role, its SaaS tenant key, the Mongo server), no secret value appears in any file of the state
folder but the four 0600 files that hold them (one is the embedded Postgres' TCP password, decision 324; one the
seal key the run's results were sealed under, issue 46), in the embedded Postgres' server log, in Dagster's event
log or in the results catalog, nor in what the run printed.

The naive arm is the one run: it reads every store live at T (Mongo, the dbt as-of views, documents, SaaS),
so every secret was used in this run.
"""

from __future__ import annotations

import datetime as dt
import os
import stat
from pathlib import Path
from typing import Any

import dagster as dg
import pytest

from churn_assets.credentials import tenant_key
from churn_assets.fabric.postgres import connection
from churn_assets.fabric.roles import arm_password, arm_secret
from churn_assets.orchestration.materialize import Session
from churn_assets.seal_key import seal_key_file
from churn_assets.services import saas_api_key, saas_keys_file
from churn_assets.services.base import DAGSTER_DATABASE, with_database

pytestmark = pytest.mark.integration

T = dt.date(2024, 1, 12)
T_PRIME = dt.date(2024, 1, 9)


@pytest.fixture(scope="module")
def evaluated(session: Session, session_defs: dg.Definitions, small_world: str) -> tuple[dict[str, Any], str]:
    from churn_assets.orchestration.scenario_runs import run_scenario

    printed: list[str] = []
    summary = run_scenario(session, session_defs, small_world, "naive", T_PRIME, T, "tiered", "default",
                           printed.append)
    return summary, "\n".join(map(str, printed))


def _secrets(session: Session, world: str) -> dict[str, str]:
    import json

    secret = arm_secret(session.paths.arm_secret_file)
    found = {"arm secret": secret, "arm password": arm_password(world, secret),
             "postgres password": session.paths.postgres_password_file.read_text().strip(),
             "seal key": seal_key_file(session.paths.root).read_text().strip()}
    for entry in json.loads(saas_keys_file(session.paths).read_text())["keys"]:
        found[f"saas issuer {entry['profile']}"] = entry["key"]
        found[f"saas tenant key {entry['profile']}"] = tenant_key(entry["key"], world)
    return found


def test_secrets_live_in_private_files_only(session: Session, evaluated: tuple[dict[str, Any], str],
                                            small_world: str) -> None:
    holders = {session.paths.arm_secret_file, saas_keys_file(session.paths), session.paths.postgres_password_file,
               seal_key_file(session.paths.root)}
    for path in holders:
        assert stat.S_IMODE(path.stat().st_mode) == 0o600, path
    secrets = _secrets(session, small_world)
    assert saas_api_key(session.paths, world_id=small_world) == secrets["saas tenant key default"]
    summary, printed = evaluated
    assert summary["tasks"] > 0 and summary["verdicts"]["transport_failure"] == 0  # SaaS was read, and answered
    haystacks: dict[str, bytes] = {"what the run printed": printed.encode()}
    scanned = 0
    for root, _dirs, files in os.walk(session.paths.root):
        for name in files:
            path = Path(root) / name
            if path in holders or not path.is_file():
                continue
            haystacks[str(path)] = path.read_bytes()
            scanned += 1
    pg_log = session.paths.pg_data / "log"
    if pg_log.exists():  # the embedded server's log (statements that failed are logged with their text)
        for path in pg_log.rglob("*") if pg_log.is_dir() else [pg_log]:
            if path.is_file():
                haystacks[str(path)] = path.read_bytes()
    with connection(with_database(session.urls.warehouse, DAGSTER_DATABASE)) as conn:
        haystacks["dagster event log"] = "\n".join(
            r[0] for r in conn.execute("SELECT event FROM event_logs")).encode()
    with connection(session.urls.warehouse) as conn:
        haystacks["results catalog"] = "\n".join(
            str(r[0]) for r in conn.execute("SELECT row_to_json(r) FROM churnbench.results_runs r")).encode()
    assert scanned > 20 and any("results" in h for h in haystacks)  # the run's files were there to scan
    leaks = [(what, where) for what, value in secrets.items() for where, text in haystacks.items()
             if value.encode() in text]
    assert leaks == []
