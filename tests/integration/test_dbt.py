"""The dbt star schema as Dagster assets: the manifest is current, lineage runs ledger -> warehouse_raw ->
models, dbt tests pass and show as asset checks, and the singular tests fail on corrupted marts (their
failing rows, kept as views, name the entity and the day)."""

from __future__ import annotations

import datetime as dt
import json
import re
from pathlib import Path
from typing import Any

import dagster as dg
import pytest

from churn_assets.fabric.postgres import connection
from churn_assets.orchestration.assets.dbt import ANALYTICS_GROUP, analytics_dbt, analytics_key
from churn_assets.orchestration.dbt_project import DBT_PROJECT_DIR, dbt_project
from churn_assets.orchestration.materialize import Session

from .warehouse_world import LAST, Projected, corrupted, projected_world, run_checks

MARTS = ("dim_user", "dim_cost_center", "dim_product", "dim_vendor", "dim_date", "fct_consumption",
         "fct_license_assignment", "fct_license_purchase", "fct_price", "fct_ticket")
AS_OF = ("assignments_as_of", "spend_by_cost_center_as_of", "active_users_as_of")


def test_manifest_lists_every_model_file() -> None:
    """The install step's `dbt parse` is current (else: `bash scripts/install.sh`)."""
    manifest = json.loads(Path(dbt_project.manifest_path).read_text())
    parsed = {n["name"] for n in manifest["nodes"].values() if n["resource_type"] == "model"}
    files = {p.stem for p in (DBT_PROJECT_DIR / "models").rglob("*.sql")}
    assert parsed == files, "dbt_project changed since the manifest was built: run `bash scripts/install.sh`"
    assert set(MARTS) | set(AS_OF) <= parsed


def test_a_dev_parse_replaces_the_manifest_whole(tmp_path: Path) -> None:
    """Under `dagster dev` the code server parses again; readers elsewhere must see a whole manifest, the old or
    the new (CI once read half of one). dbt writes in place (same inode); the preparer renames a finished file in."""
    import shutil

    from dagster_dbt import DbtProject

    from churn_assets.orchestration.dbt_project import VenvDbtPreparer

    copy = tmp_path / "dbt_project"
    shutil.copytree(DBT_PROJECT_DIR, copy, ignore=shutil.ignore_patterns("logs", "dbt.log"))
    project = DbtProject(project_dir=copy, profiles_dir=copy)
    manifest = Path(project.manifest_path)
    before = manifest.stat().st_ino
    VenvDbtPreparer()._prepare_manifest(project)
    assert manifest.stat().st_ino != before  # a new file renamed over the old one, not rewritten in place
    names = lambda path: {n["name"] for n in json.loads(path.read_text())["nodes"].values()}  # noqa: E731
    assert names(manifest) == names(Path(dbt_project.manifest_path))
    assert [p.name for p in manifest.parent.iterdir() if p.name.startswith(".")] == []  # its scratch folder is gone


def ancestors(graph: Any, key: dg.AssetKey) -> set[dg.AssetKey]:
    seen: set[dg.AssetKey] = set()
    todo = [key]
    while todo:
        for parent in graph.get(todo.pop()).parent_keys:
            if parent not in seen:
                seen.add(parent)
                todo.append(parent)
    return seen


def test_lineage_runs_from_ledger_through_raw_to_the_models() -> None:
    from churn_assets.orchestration.definitions import defs

    graph = defs.resolve_asset_graph()
    assert graph.get(dg.AssetKey("warehouse_raw")).parent_keys == {dg.AssetKey("ledger")}
    assert graph.get(dg.AssetKey("warehouse_truth")).parent_keys == {dg.AssetKey("ledger")}
    for model in MARTS + AS_OF:
        key = analytics_key(model)
        assert key in analytics_dbt.keys
        assert {dg.AssetKey("warehouse_raw"), dg.AssetKey("ledger")} <= ancestors(graph, key), model
        assert graph.get(key).group_name == ANALYTICS_GROUP
        assert graph.get(key).partitions_def == graph.get(dg.AssetKey("ledger")).partitions_def
    staging = [k for k in analytics_dbt.keys if k.path[-1].startswith("stg_")]
    assert staging and all(graph.get(k).parent_keys == {dg.AssetKey("warehouse_raw")} for k in staging)
    # dbt tests are asset checks of the models, the singular ones included.
    checks = {(k.asset_key.path[-1], k.name) for k in graph.asset_check_keys}
    assert ("fct_license_assignment", "assert_no_overlapping_license_validity") in checks
    assert ("spend_by_cost_center_as_of", "assert_spend_by_cost_center_equals_sum_over_licenses") in checks
    assert ("dim_user", "unique_dim_user_user_key") in checks


@pytest.mark.integration
def test_dbt_tests_pass_and_show_as_asset_checks(session: Session, small_world: str) -> None:
    world = projected_world(session, small_world)
    assert "119 dbt tests passed" in world.output or "dbt tests passed" in world.output
    # the build's progress while dbt works (`progress.Tally` on stderr): models and tests done, naming the world
    label = re.escape(f"analytics_dbt [{small_world}]")
    assert re.search(rf"^  {label}: 0/\d+ models and tests done$", world.output, re.M), world.output
    assert re.search(rf"^  {label}: (\d+)/\1 models and tests done in \d+\.\d s$", world.output, re.M), world.output
    graph_checks = sorted(analytics_dbt.check_keys, key=str)
    assert len(graph_checks) >= 100
    overlap = dg.AssetCheckKey(analytics_key("fct_license_assignment"), "assert_no_overlapping_license_validity")
    for key in [*graph_checks[:10], overlap]:
        [record] = session.instance.event_log_storage.get_asset_check_execution_history(key, limit=1)
        assert record.event is not None and record.event.dagster_event is not None
        assert record.event.dagster_event.event_specific_data.passed, key


@pytest.mark.integration
def test_singular_tests_fail_on_corrupted_marts(session: Session, session_defs: dg.Definitions,
                                                small_world: str) -> None:
    world: Projected = projected_world(session, small_world)
    an = world.schema("analytics")
    url = session.urls.warehouse
    with connection(url) as conn:
        lic, user, since = conn.execute(
            f'SELECT license_id, user_id, valid_from FROM "{an}".fct_license_assignment '
            "WHERE valid_to IS NULL ORDER BY license_id LIMIT 1").fetchone()  # type: ignore[misc]
        view_sql = conn.execute("SELECT pg_get_viewdef(%s::regclass)",
                                (f'"{an}".spend_by_cost_center_as_of',)).fetchone()[0]  # type: ignore[index]
    view_sql = view_sql.strip().rstrip(";")
    overlapping = (f"INSERT INTO \"{an}\".fct_license_assignment (assignment_key, license_id, user_id, product_id, "
                   f"ended_by, valid_from, valid_to, source_seq) SELECT 'overlap-test', license_id, 'usr_intruder', "
                   f"product_id, NULL, valid_from + 3, NULL, source_seq + 1000000 FROM \"{an}\".fct_license_assignment "
                   f"WHERE license_id = '{lic}' AND valid_to IS NULL")
    wrong_spend = (f'CREATE OR REPLACE VIEW "{an}".spend_by_cost_center_as_of AS SELECT as_of_day, cost_center_id, '
                   f"business_unit, monthly_spend_usd + CASE WHEN as_of_day = '{LAST}' THEN 1 ELSE 0 END AS "
                   f"monthly_spend_usd, licenses FROM ({view_sql}) AS v")
    overlap_key = dg.AssetCheckKey(analytics_key("fct_license_assignment"), "assert_no_overlapping_license_validity")
    spend_key = dg.AssetCheckKey(analytics_key("spend_by_cost_center_as_of"),
                                 "assert_spend_by_cost_center_equals_sum_over_licenses")
    keys = [overlap_key, spend_key]
    # One corruption per run: in `dbt build` a failed test skips the tests downstream of its model.
    with corrupted(url, [overlapping], [f"DELETE FROM \"{an}\".fct_license_assignment "
                                        "WHERE assignment_key = 'overlap-test'"]):
        evaluations = run_checks(session, session_defs, world.world_id, [overlap_key])
        assert not evaluations[overlap_key.name].passed
        with connection(url) as conn:  # dbt keeps a singular test's failing rows as a view
            overlap = conn.execute(f'SELECT license_id, first_holder, second_holder, second_from FROM '
                                   f'"{an}".assert_no_overlapping_license_validity').fetchall()
    assert overlap == [(lic, user, "usr_intruder", since + dt.timedelta(days=3))]
    with corrupted(url, [wrong_spend], [f'CREATE OR REPLACE VIEW "{an}".spend_by_cost_center_as_of AS {view_sql}']):
        evaluations = run_checks(session, session_defs, world.world_id, [spend_key])
        assert not evaluations[spend_key.name].passed
        with connection(url) as conn:
            spend = conn.execute(f'SELECT as_of_day, cost_center_id, expected_usd, actual_usd FROM '
                                 f'"{an}".assert_spend_by_cost_center_equals_sum_over_licenses').fetchall()
    assert spend and {row[0] for row in spend} == {LAST}
    assert all(row[3] - row[2] == 1 for row in spend)
    again = run_checks(session, session_defs, world.world_id, keys)
    assert all(again[k.name].passed for k in keys)
