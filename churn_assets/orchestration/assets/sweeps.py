"""The `sweep_report` asset: one partition per launched sweep; its materialization shows the sweep's report
(Markdown with the plots inlined) in the UI and writes the same to `<state>/results/sweeps/<sweep id>/`."""

# No `from __future__ import annotations`: Dagster reads the context and resource annotations at decoration time.
import dagster as dg

from churn_assets.grounding.registry import load_registry
from churn_assets.orchestration.assets.common import user_errors
from churn_assets.orchestration.assets.evaluation import eval_run
from churn_assets.orchestration.partitions import ANY_PARTITION, sweep_partitions
from churn_assets.orchestration.resources import StateResource


@dg.asset(
    partitions_def=sweep_partitions,
    deps=[dg.AssetDep(eval_run, partition_mapping=ANY_PARTITION)],
    group_name="evaluation",
    kinds={"python", "markdown"},
    description="A sweep's report: every cell's stale answers, exposure, prediction, served ages and cost, with "
                "plots (stale answers against cache age, served age per class, TTL x change-rate heatmap, "
                "staleness against refresh cost, verdicts per arm, stale answers per class). Files under "
                "`<state>/results/sweeps/<sweep id>/`.",
)
def sweep_report(context: dg.AssetExecutionContext, state: StateResource) -> dg.MaterializeResult:
    from churn_assets.orchestration.sweep_records import load_sweep, sweep_report_dir
    from churn_assets.sweeps.report import build_report

    paths = state.paths
    with user_errors():
        record = load_sweep(paths, context.partition_key)
    cached = [c.name for c in load_registry().staged_classes]
    report = build_report(record.to_json(), sweep_report_dir(paths, record.sweep_id), cached)
    counts = record.status_counts()
    context.log.info(f"sweep {record.sweep_id}: report in {report.folder}")
    return dg.MaterializeResult(metadata={
        "report": dg.MetadataValue.md(report.markdown_inline()),
        "cells_done": counts["done"],
        "cells_failed": counts["failed"],
        "cells_pending": counts["pending"],
        "exposure_only_cells": len(record.exposure_cells),
        "folder": dg.MetadataValue.path(str(report.folder)),
        "preset": record.spec.preset,
    })
