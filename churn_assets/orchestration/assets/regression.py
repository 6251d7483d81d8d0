"""The `regression_report` asset and its blocking `regression_gate` check: one partition per regression sweep
(the `regression` preset's sweep id). The report compares the sweep's figures (per arm and cell: verdict counts,
stale answers, exposure, accuracy) and the config hashes (world configs, registry, templates) with the baseline
(`baselines/regression.json`, or `CHURNBENCH_REGRESSION_BASELINE`); the check fails when a figure moved beyond the
baseline's thresholds or a hash changed without a baseline update, and names every figure that moved. Its files
(`regression.md`, `regression_gate.json`) go to the folder of the run's night
(`<report dir>/nights/<YYYY-MM-DD>/`, `sweep_records.regression_night_dir`): the sweep id is the same every night,
and a failing night never overwrites an earlier one."""

# No `from __future__ import annotations`: Dagster reads the context and resource annotations at decoration time.
import datetime as dt
import json
import warnings
from collections.abc import Mapping
from pathlib import Path

import dagster as dg

from churn_assets.orchestration.assets.common import user_errors
from churn_assets.orchestration.assets.evaluation import eval_run
from churn_assets.orchestration.metadata import table_metadata
from churn_assets.orchestration.partitions import ANY_PARTITION, regression_partitions
from churn_assets.orchestration.resources import StateResource
from churn_assets.state import atomic_write_text
from churn_assets.unique_keys import load_json

GATE_FILE = "regression_gate.json"
MAX_LISTED = 50  # findings listed in the check's metadata (the file holds all)


def _gate_file(state: StateResource, sweep_id: str, tags: Mapping[str, str]) -> Path:
    """The gate file of the run's night (its `NIGHT_TAG`, else today): one folder per run date."""
    from churn_assets.orchestration.sweep_records import NIGHT_TAG, regression_night, regression_night_dir

    night = dt.date.fromisoformat(tags[NIGHT_TAG]) if NIGHT_TAG in tags else regression_night()
    return regression_night_dir(state.paths, sweep_id, night) / GATE_FILE


@dg.asset(
    partitions_def=regression_partitions,
    deps=[dg.AssetDep(eval_run, partition_mapping=ANY_PARTITION)],
    group_name="evaluation",
    kinds={"python", "markdown"},
    description="The nightly regression's report: a regression sweep's figures per arm and cell (verdict counts, "
                "stale answers, exposure, accuracy) beside the baseline's, and the config hashes it was made from. "
                "Its blocking check `regression_gate` fails when a figure moved or a hash changed.",
)
def regression_report(context: dg.AssetExecutionContext, state: StateResource) -> dg.MaterializeResult:
    from churn_assets.orchestration.sweep_records import load_sweep
    from churn_assets.sweeps.regression import (
        FIGURE_COLUMNS,
        baseline_path,
        current_hashes,
        figure_rows,
        figures_of,
        gate,
        load_baseline,
        report_markdown,
    )

    paths = state.paths
    path = baseline_path()
    with user_errors():
        record = load_sweep(paths, context.partition_key)
        baseline = load_baseline(path)
    figures, hashes = figures_of(record.to_json()), current_hashes(record.spec)
    result = gate(baseline, figures, hashes)
    markdown = report_markdown(result, figures, hashes, str(path))
    gate_file = _gate_file(state, record.sweep_id, context.run.tags)
    gate_file.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(gate_file, json.dumps({**result.to_json(), "baseline": str(path), "hashes": hashes,
                                             "figures": figures}, indent=1, sort_keys=True) + "\n")
    atomic_write_text(gate_file.parent / "regression.md", markdown + "\n")
    context.log.info(result.summary())
    for line in result.lines():
        context.log.info(line)
    return dg.MaterializeResult(metadata={
        "report": dg.MetadataValue.md(markdown),
        "figures": table_metadata(figure_rows(figures), FIGURE_COLUMNS),
        "gate_passed": result.passed,
        "figures_moved": len(result.moved),
        "hashes_changed": len(result.hash_changes),
        "cells": len(figures),
        "baseline": dg.MetadataValue.path(str(path)),
        "registry_hash": dg.MetadataValue.text(str(hashes["registry"])),
        "templates_hash": dg.MetadataValue.text(str(hashes["templates"])),
        "folder": dg.MetadataValue.path(str(gate_file.parent)),
    })


def _regression_gate(context: dg.AssetCheckExecutionContext, state: StateResource) -> dg.AssetCheckResult:
    gate_file = _gate_file(state, context.partition_key, context.run.tags)
    try:
        found = load_json(gate_file.read_text(), str(gate_file))
    except FileNotFoundError:
        return dg.AssetCheckResult(passed=False, description=f"no gate result at {gate_file}: materialize "
                                                             "regression_report for this sweep first")
    lines = ([f"hash changed without a baseline update: {h}" for h in found["hash_changes"]]
             + [f"{m['cell']}: {m['figure']} {m['baseline']} -> {m['current']} (threshold {m['threshold']:g})"
                for m in found["moved"]]
             + [f"missing cell: {c}" for c in found["missing_cells"]]
             + [f"new cell: {c}" for c in found["new_cells"]])
    return dg.AssetCheckResult(
        passed=bool(found["passed"]),
        description=found["summary"] + ("" if not lines else ": " + "; ".join(lines[:MAX_LISTED])),
        metadata={
            "figures_moved": dg.MetadataValue.json(found["moved"][:MAX_LISTED]),
            "hash_changes": dg.MetadataValue.json(found["hash_changes"]),
            "missing_cells": dg.MetadataValue.json(found["missing_cells"]),
            "new_cells": dg.MetadataValue.json(found["new_cells"]),
            "baseline": dg.MetadataValue.path(found["baseline"]),
        },
    )


with warnings.catch_warnings():
    warnings.simplefilter("ignore", dg.PreviewWarning)  # partitioned checks are "preview" in Dagster 1.13
    regression_gate = dg.asset_check(
        asset=regression_report, name="regression_gate", blocking=True, partitions_def=regression_partitions,
        description="Every figure of the regression sweep within the baseline's thresholds, and the world config, "
                    "registry and templates hashes equal to the baseline's; names every figure that moved.",
    )(_regression_gate)
