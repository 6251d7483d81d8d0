"""The asset graph equals the committed snapshot (`tests/snapshots/asset_graph.json`).

Asset keys, partitionings and check names are what a state folder's Dagster history is keyed by: a change
here orphans history or changes what the UI shows, so it must be deliberate. Regenerate after an intended
change with `python tests/asset_graph_snapshot.py > tests/snapshots/asset_graph.json` and review the diff.
"""

from __future__ import annotations

import json
from pathlib import Path

from asset_graph_snapshot import asset_graph
from dagster import AssetKey

from churn_assets.freshness import scenario as plan_vocabulary
from churn_assets.orchestration.dbt_project import dbt_asset_keys
from churn_assets.orchestration.definitions import defs

SNAPSHOT = Path(__file__).parent / "snapshots" / "asset_graph.json"


def test_asset_graph_matches_the_snapshot() -> None:
    expected = json.loads(SNAPSHOT.read_text())
    actual = asset_graph(defs)
    added = sorted(set(actual["assets"]) - set(expected["assets"]))
    removed = sorted(set(expected["assets"]) - set(actual["assets"]))
    assert not added and not removed, f"assets added {added}, removed {removed}"
    changed = [k for k in actual["assets"] if actual["assets"][k] != expected["assets"][k]]
    assert not changed, f"assets changed: {changed}"
    assert actual["checks"] == expected["checks"]


def test_every_asset_the_planner_names_exists() -> None:
    """The scenario planner names inputs by asset key strings; each is an asset of the code location."""
    keys = {s.key.to_user_string() for s in defs.resolve_all_asset_specs()}
    named = {plan_vocabulary.LEDGER, *plan_vocabulary.WAREHOUSE, plan_vocabulary.OPERATIONAL_STORE,
             plan_vocabulary.CONTRACT_DOCUMENTS, plan_vocabulary.RAG_INDEX, plan_vocabulary.TASK_SET}
    assert named <= keys
    # The dbt build stands for every model; the manifest's models are exactly the dbt assets.
    dbt_keys = {k.to_user_string() for k in defs.get_assets_def(AssetKey.from_user_string(dbt_asset_keys()[0])).keys}
    assert set(dbt_asset_keys()) == dbt_keys
