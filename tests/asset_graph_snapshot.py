"""The asset graph as plain JSON: what `test_asset_graph_snapshot.py` compares with the committed snapshot.

Asset keys, groups, partitionings, dependencies with their partition mappings, and every check (blocking
or not): what the Dagster instance of an existing state folder keys its history by, and what the UI shows.

    python tests/asset_graph_snapshot.py [MODULE] > tests/snapshots/asset_graph.json   # regenerate
"""

from __future__ import annotations

import importlib
import json
import sys
from typing import Any

import dagster as dg

SNAPSHOT_MODULE = "churn_assets.orchestration.definitions"


def _partitioning(p: dg.PartitionsDefinition | None) -> Any:
    if p is None:
        return None
    if isinstance(p, dg.MultiPartitionsDefinition):
        return {"multi": {d.name: _partitioning(d.partitions_def) for d in p.partitions_defs}}
    if isinstance(p, dg.DynamicPartitionsDefinition):
        return {"dynamic": p.name}
    if isinstance(p, dg.TimeWindowPartitionsDefinition):
        return {"daily": [p.start.date().isoformat(), p.end.date().isoformat() if p.end else None]}
    return type(p).__name__


def asset_graph(defs: dg.Definitions) -> dict[str, Any]:
    graph = defs.resolve_asset_graph()
    assets = {}
    for spec in sorted(defs.resolve_all_asset_specs(), key=lambda s: s.key.to_user_string()):
        deps = {}
        for dep in spec.deps:
            mapping = dep.partition_mapping
            deps[dep.asset_key.to_user_string()] = type(mapping).__name__ if mapping is not None else None
        assets[spec.key.to_user_string()] = {
            "group": spec.group_name,
            "kinds": sorted(spec.kinds),
            "partitions": _partitioning(spec.partitions_def),
            "deps": dict(sorted(deps.items())),
        }
    checks = sorted(
        f"{k.asset_key.to_user_string()}:{k.name}" + (" (blocking)" if graph.get_check_spec(k).blocking else "")
        for k in graph.asset_check_keys)
    return {"assets": assets, "checks": checks}


def main(module: str = SNAPSHOT_MODULE) -> None:
    defs = importlib.import_module(module).defs
    json.dump(asset_graph(defs), sys.stdout, indent=1, sort_keys=True)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main(*sys.argv[1:])
