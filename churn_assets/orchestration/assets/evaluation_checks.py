"""Checks of `eval_run`: per cached class, "served age at T within TTL", so the UI shows per scenario which tiers
were honoured.

One check per cached class of the registry (`served_age_within_ttl_<class>`), all evaluated by one multi-check
after each `eval_run` materialization of a scenario: the served age is T minus the oldest day the run's reads
observed for the class (the data days found in the data read, not the plan; `evaluation/served_age.py`), compared
with the class's effective TTL in the scenario's stored plan. A class gets no result (the UI shows the check
skipped) when the scenario's policy gives it no TTL (`off`, budget policies) or its arm does not serve a refresh
policy (naive reads at T, the RAG arms at T'). Not blocking: a stale serve is a finding of the run, recorded in
its verdicts, not a broken asset.
"""

# No `from __future__ import annotations`: Dagster reads the context and resource annotations at decoration time.
import warnings
from collections.abc import Iterator
from pathlib import Path

import dagster as dg

from churn_assets.arms.registry import arm_spec
from churn_assets.grounding.registry import load_registry
from churn_assets.orchestration.assets.evaluation import eval_run
from churn_assets.orchestration.partitions import scenario_partitions
from churn_assets.orchestration.resources import StateResource
from churn_assets.orchestration.scenario_in_hand import in_hand
from churn_assets.orchestration.scenarios import read_scenario
from churn_assets.unique_keys import load_json

CHECK_PREFIX = "served_age_within_ttl_"
CACHED_CLASSES = [c.name for c in load_registry().staged_classes]


def check_name(entity_class: str) -> str:
    return f"{CHECK_PREFIX}{entity_class}"


def _results_folder(instance: dg.DagsterInstance, partition_key: str) -> Path | None:
    """The results folder the latest materialization of the `eval_run` partition recorded."""
    records = instance.fetch_materializations(
        dg.AssetRecordsFilter(asset_key=eval_run.key, asset_partitions=[partition_key]), limit=1, ascending=False)
    if not records.records:
        return None
    materialization = records.records[0].asset_materialization
    value = materialization.metadata.get("results") if materialization is not None else None
    return Path(str(value.value)) if value is not None else None


def _served_age_checks(context: dg.AssetCheckExecutionContext, state: StateResource
                       ) -> Iterator[dg.AssetCheckResult]:
    from churn_assets.evaluation.served_age import observed_days, served_age

    key = context.partition_key
    # What the command running `eval_run` read (its plan made by then), else one read of the scenario's file.
    handed = in_hand(key)
    read = handed.stored if handed is not None and handed.stored.plan is not None else read_scenario(state.paths, key)
    scenario, plan = read.scenario, read.plan
    folder = _results_folder(context.instance, key)
    if plan is None or folder is None or not (folder / "tasks.jsonl").exists():
        for c in CACHED_CLASSES:
            yield dg.AssetCheckResult(check_name=check_name(c), passed=False,
                                      description=f"{key}: no stored plan or results folder to read the "
                                                  "served days from")
        return
    if not arm_spec(scenario.arm).reads.serves_policy:
        context.log.info(f"{key}: arm {scenario.arm} does not serve a refresh policy; served-age checks skipped")
        return
    tasks_file = folder / "tasks.jsonl"
    rows = [load_json(line, str(tasks_file)) for line in tasks_file.read_text().splitlines() if line.strip()]
    seen = observed_days(rows)
    for c in CACHED_CLASSES:
        ttl = plan.effective_ttls.get(c)
        if ttl is None:  # the policy is not TTL-driven for this class: nothing to honour (shown skipped)
            continue
        found = served_age(c, int(ttl), scenario.t, seen.get(c, ()))
        yield dg.AssetCheckResult(
            check_name=check_name(c), passed=found.within_ttl, description=found.describe(),
            metadata={"ttl_days": found.ttl_days, "served_age_days": found.max_age if found.max_age is not None else -1,
                      "observed_days": dg.MetadataValue.json([d.isoformat() for d in found.days]),
                      "policy": dg.MetadataValue.text(scenario.policy)})


with warnings.catch_warnings():
    warnings.simplefilter("ignore", dg.PreviewWarning)  # partitioned checks are "preview" in Dagster 1.13
    served_age_within_ttl = dg.multi_asset_check(
        specs=[dg.AssetCheckSpec(check_name(c), asset=eval_run, partitions_def=scenario_partitions,
                                 description=f"Served age at T of {c}, from the days the run's reads observed, is "
                                             "at most its TTL (skipped when the policy gives it none)")
               for c in CACHED_CLASSES],
        can_subset=True,
        name="served_age_within_ttl",
        description="Per cached class: the served age at T, from the observed data days of the run's reads, "
                    "within the class's effective TTL.",
    )(_served_age_checks)


def _inputs_as_read(context: dg.AssetCheckExecutionContext) -> dg.AssetCheckResult:
    from churn_assets.orchestration import lineage

    records = context.instance.fetch_materializations(
        dg.AssetRecordsFilter(asset_key=eval_run.key, asset_partitions=[context.partition_key]), limit=1)
    record = records.records[0] if records.records else None
    found = lineage.judge_record(context.instance, record) if record is not None else None
    if found is None:
        return dg.AssetCheckResult(passed=True, description="this evaluation recorded no input versions (made "
                                                            "before they were recorded): not judged")
    return dg.AssetCheckResult(passed=found.passed, description=found.description,
                               metadata={"changed": dg.MetadataValue.json(found.changed), "inputs": found.inputs})


with warnings.catch_warnings():
    warnings.simplefilter("ignore", dg.PreviewWarning)
    inputs_as_read = dg.asset_check(
        asset=eval_run, name="inputs_as_read", partitions_def=scenario_partitions, blocking=False,
        description="Every input partition this evaluation read (its traces: store, table, observed day; and the "
                    "ledger and task set) is still at the data version it read: fails naming each one "
                    "rematerialized since. Judged again when one of them is rematerialized (by the CLI, the jobs, "
                    "or the evaluation_inputs sensor for runs launched from the UI).",
    )(_inputs_as_read)
