"""What an evaluation read, as Dagster partitions, and the check that an input it read was not rematerialized with
other content since (decision 266).

`eval_run` depends on every partition of each input (Dagster's built-in mappings cannot say "the partitions this
scenario's plan names", `partitions.py`), so Dagster's lineage graph and its own staleness cannot tell which
partitions one evaluation read: any rematerialization anywhere would mark every evaluation stale. The run's
traces can: every read names its store, table, entity class, observed day and observed hash. This module turns
them into the input partitions read (`read_rows`: a staged table's day -> `staged_<class>[<day>|<world>]`, a live
as-of view -> `analytics/<view>[<world>]`, ...), adds what the evaluation itself reads (the ledger for gold, the
task set of T), and records with each the data version of its latest materialization when the evaluation ran
(`eval_run`'s metadata: a table, a Markdown table with links to each partition, and `input_versions`).

`judge` compares those versions with the current ones: the `inputs_as_read` check of `eval_run` fails naming every
input partition rematerialized with another version. The check runs with every `eval_run` materialization, and
again, in a check run of its own, for the evaluations that read a partition just rematerialized with another
version (`changed_by`): `materialize` runs it for the runs of this process (the CLI, the jobs), the
`evaluation_inputs` sensor requests it for the others (a materialization launched from the UI). Only the
evaluations that read that partition are looked at, so another scenario's evaluation is never marked by it.
(Dagster stores one check evaluation reported outside a run per partition, so the check runs as a run.)

Limits: a version is content only where the asset gives one (staged caches: their rows' hash; documents, the
vector index, the RAG corpus, the operational store, the task set, the ledger and the warehouse pair: content or
the ledger head they are made from); the dbt models get Dagster's default, a new version per run, so any rebuild
of a world's dbt project marks the evaluations that read its views, changed or not. An evaluation materialized
before this check has no recorded versions: it is judged from the next materialization on.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from churn_assets.freshness.scenario import (
    CONTRACT_DOCUMENTS,
    LEDGER,
    OPERATIONAL_STORE,
    RAG_INDEX,
    TASK_SET,
    VECTOR_INDEX,
)
from churn_assets.grounding.registry import load_registry
from churn_assets.grounding.staging import staged_specs
from churn_assets.orchestration.dbt_project import analytics_key
from churn_assets.orchestration.metadata import table_metadata
from churn_assets.orchestration.partitions import world_day_key

if TYPE_CHECKING:
    import dagster as dg

EVAL_RUN = "eval_run"
CHECK_NAME = "inputs_as_read"
VERSIONS = "input_versions"  # eval_run metadata: {"<asset>[<partition>]": data version}
DATA_VERSION_TAG = "dagster/data_version"  # Dagster's own tag on every materialization
TRUTH = "warehouse_truth"  # the SaaS API serves each tenant from its world's truth schema
# Stores whose reads name a day partition of one asset (the others: staging by table, warehouse by view, saas).
DAY_ASSET = {"operational": OPERATIONAL_STORE, "documents": CONTRACT_DOCUMENTS, "vector_index": VECTOR_INDEX,
             "rag_index": RAG_INDEX}
COLUMNS = ("input", "entity_class", "observed_day", "observed_hash", "reads", "store", "table", "data_version")


@dataclass(frozen=True)
class InputPartition:
    asset: str  # asset key as a user string (`staged_prices`, `analytics/licenses_as_of`)
    partition: str

    def __str__(self) -> str:
        return f"{self.asset}[{self.partition}]"

    def link(self) -> str:
        """The partition's page in the Dagster UI (relative to the UI's root)."""
        return f"/assets/{self.asset}?view=partitions&partition={quote(self.partition, safe='')}"


@dataclass(frozen=True)
class ReadRow:
    """The reads of one input partition through one table: how many, and what they observed."""

    input: InputPartition
    store: str
    table: str
    entity_class: str
    observed_day: str
    observed_hash: str  # the hash all the reads observed, or "<n> hashes (one per query)"
    reads: int
    data_version: str = ""

    def to_row(self) -> dict[str, Any]:
        """The row the UI's table shows (hashes and versions cut to 12 characters; `input_versions` holds them
        whole)."""
        return {"input": str(self.input), "store": self.store, "table": self.table, "entity_class": self.entity_class,
                "observed_day": self.observed_day, "observed_hash": self.observed_hash[:12] if " " not in
                self.observed_hash else self.observed_hash, "reads": self.reads,
                "data_version": self.data_version[:12]}


def staged_assets() -> dict[str, str]:
    """Staged table -> its asset (`staged_<class>`), from the registry."""
    return {spec.table: spec.asset_name for spec in staged_specs(load_registry())}


def input_of(read: Mapping[str, Any], world_id: str, staged: Mapping[str, str]) -> InputPartition | None:
    """The partition a traced read came from (None: a store this module does not know)."""
    store, table, day = str(read.get("store")), str(read.get("table") or ""), str(read.get("observed_day") or "")
    relation = table.rsplit(".", 1)[-1]
    if store == "staging" and relation in staged:
        return InputPartition(staged[relation], world_day_key(world_id, day))
    if store in DAY_ASSET:
        return InputPartition(DAY_ASSET[store], world_day_key(world_id, day))
    if store == "warehouse":
        return InputPartition(analytics_key(relation).to_user_string(), world_id)
    if store == "saas":
        return InputPartition(TRUTH, world_id)
    return None


def read_rows(rows: Iterable[Mapping[str, Any]], world_id: str, t: str,
              staged: Mapping[str, str] | None = None) -> list[ReadRow]:
    """The input partitions an evaluation's result rows (`tasks.jsonl`) read, one row per (partition, table), and
    what the evaluation itself reads: the ledger (gold) and the task set of T."""
    staged = staged_assets() if staged is None else staged
    counts: dict[tuple[InputPartition, str, str, str, str], list[str]] = defaultdict(list)
    for row in rows:
        for trace in row.get("traces") or []:
            for read in trace.get("reads") or []:
                partition = input_of(read, world_id, staged)
                if partition is None:
                    continue
                key = (partition, str(read["store"]), str(read["table"]), str(read.get("entity_class") or ""),
                       str(read.get("observed_day") or ""))
                counts[key].append(str(read.get("observed_hash") or ""))
    out = [ReadRow(partition, store, table, cls, day, _hashes(hashes), len(hashes))
           for (partition, store, table, cls, day), hashes in counts.items()]
    out += [ReadRow(InputPartition(LEDGER, world_id), "ledger", "ledger.jsonl", "", "", "", 0),
            ReadRow(InputPartition(TASK_SET, world_day_key(world_id, t)), "task set", "tasks.jsonl", "", t, "", 0)]
    return sorted(out, key=lambda r: (r.input.asset, r.input.partition, r.table))


def _hashes(hashes: Sequence[str]) -> str:
    distinct = sorted(set(h for h in hashes if h))
    if not distinct:
        return ""
    return distinct[0] if len(distinct) == 1 else f"{len(distinct)} hashes (one per query)"


def versions(rows: Sequence[ReadRow]) -> dict[str, str]:
    """`{"<asset>[<partition>]": data version}` of the rows' partitions (one entry per partition)."""
    return {str(r.input): r.data_version for r in rows}


def judge(recorded: Mapping[str, str], current: Mapping[str, str | None]) -> list[str]:
    """The input partitions whose version is no longer the one read, one line each (empty: all as read)."""
    changed = []
    for partition, version in sorted(recorded.items()):
        now = current.get(partition)
        if now != version:
            what = "no longer materialized" if now is None else f"now version {now[:12]}"
            changed.append(f"{partition}: read at version {version[:12] or '-'}, {what}")
    return changed


# --- against an instance ----------------------------------------------------------------------------------


def latest_version(instance: dg.DagsterInstance, partition: InputPartition) -> str | None:
    """The data version of the partition's latest materialization (None: never materialized)."""
    import dagster as dg

    found = instance.fetch_materializations(
        dg.AssetRecordsFilter(asset_key=dg.AssetKey.from_user_string(partition.asset),
                              asset_partitions=[partition.partition]), limit=1)
    if not found.records:
        return None
    materialization = found.records[0].asset_materialization
    return None if materialization is None else (materialization.tags or {}).get(DATA_VERSION_TAG, "")


def with_versions(instance: dg.DagsterInstance, rows: Sequence[ReadRow]) -> list[ReadRow]:
    found: dict[InputPartition, str] = {}
    for r in rows:
        if r.input not in found:
            found[r.input] = latest_version(instance, r.input) or ""
    return [ReadRow(r.input, r.store, r.table, r.entity_class, r.observed_day, r.observed_hash, r.reads,
                    found[r.input]) for r in rows]


def metadata(rows: Sequence[ReadRow]) -> dict[str, Any]:
    """`eval_run`'s lineage metadata: the table (with its schema), a link to each partition read (`link_labels`,
    which the UI shows as links), and the versions the check compares."""
    import dagster as dg

    inputs = list(dict.fromkeys(r.input for r in rows))
    links = {label: dg.MetadataValue.url(p.link()) for p, label in zip(inputs, link_labels(inputs), strict=True)}
    return {"inputs_read": table_metadata([r.to_row() for r in rows], COLUMNS), **links,
            VERSIONS: dg.MetadataValue.json(versions(rows))}


def link_labels(inputs: Sequence[InputPartition]) -> list[str]:
    """`read/<asset> <day>` per input partition: the key's parts every input shares (the run's world) left out,
    since the UI cuts a long label at its end and two keys of one world looked alike there; the link keeps the
    whole key. Two inputs whose labels would be equal keep their whole keys."""
    parts = [p.partition.split("|") for p in inputs]
    shared = set.intersection(*(set(ps) for ps in parts)) if parts else set()
    labels = [" ".join([f"read/{p.asset}", *(x for x in ps if x not in shared)]) for p, ps in zip(inputs, parts,
                                                                                                   strict=True)]
    return labels if len(set(labels)) == len(labels) else [f"read/{p}" for p in inputs]


def recorded_versions(record: Any) -> dict[str, str] | None:
    """The input versions an `eval_run` materialization record holds (None: made before they were recorded)."""
    materialization = record.asset_materialization if record is not None else None
    value = (materialization.metadata or {}).get(VERSIONS) if materialization is not None else None
    return None if value is None else {str(k): str(v) for k, v in dict(value.value).items()}


@dataclass(frozen=True)
class Verdict:
    passed: bool
    changed: list[str]
    inputs: int

    @property
    def description(self) -> str:
        return describe(self.changed, self.inputs)


def judge_record(instance: dg.DagsterInstance, record: Any) -> Verdict | None:
    """The `inputs_as_read` verdict on one `eval_run` materialization `record` (None: it recorded no versions)."""
    recorded = recorded_versions(record)
    if recorded is None:
        return None
    changed = judge(recorded, {k: latest_version(instance, _parse(k)) for k in recorded})
    return Verdict(not changed, changed, len(recorded))


def describe(changed: Sequence[str], inputs: int) -> str:
    if not changed:
        return f"every one of the {inputs} input partitions it read is at the version it read"
    return (f"{len(changed)} of the {inputs} input partitions it read were rematerialized since: "
            + "; ".join(changed[:5]) + (f" (and {len(changed) - 5} more)" if len(changed) > 5 else ""))


def _parse(text: str) -> InputPartition:
    asset, _, rest = text.partition("[")
    return InputPartition(asset, rest[:-1])


def latest_evaluations(instance: dg.DagsterInstance) -> dict[str, Any]:
    """`eval_run` partition -> its latest materialization record."""
    import dagster as dg

    latest: dict[str, Any] = {}
    cursor = None
    while True:
        page = instance.fetch_materializations(dg.AssetRecordsFilter(asset_key=dg.AssetKey(EVAL_RUN)), limit=500,
                                               cursor=cursor, ascending=False)
        for record in page.records:
            partition = record.asset_materialization.partition if record.asset_materialization else None
            if partition is not None and partition not in latest:
                latest[partition] = record
        if not page.has_more:
            return latest
        cursor = page.cursor


def readers_of(instance: dg.DagsterInstance, changed: Iterable[InputPartition]) -> list[str]:
    """The `eval_run` partitions whose latest materialization read one of `changed`."""
    wanted = {str(p) for p in changed}
    if not wanted:
        return []
    return sorted(partition for partition, record in latest_evaluations(instance).items()
                  if not wanted.isdisjoint(recorded_versions(record) or {}))


NOT_INPUTS = (EVAL_RUN, "sweep_report", "regression_report")  # assets no evaluation reads


def changed_by(instance: dg.DagsterInstance, materialized: Iterable[tuple[str, str]]) -> list[str]:
    """After (asset, partition) pairs were materialized: the evaluations that read one of them at another version
    than its new one, whose `inputs_as_read` check must run again."""
    changed = [p for asset, partition in materialized if asset not in NOT_INPUTS
               and (p := rematerialized(instance, asset, partition)) is not None]
    return readers_of(instance, changed)


def rematerialized(instance: dg.DagsterInstance, asset: str, partition: str) -> InputPartition | None:
    """The partition when its latest materialization has another version than the one before (a first
    materialization, or one with the same version, is no change)."""
    import dagster as dg

    found = instance.fetch_materializations(
        dg.AssetRecordsFilter(asset_key=dg.AssetKey.from_user_string(asset), asset_partitions=[partition]), limit=2)
    if len(found.records) < 2:
        return None
    versions_ = [(r.asset_materialization.tags or {}).get(DATA_VERSION_TAG) if r.asset_materialization else None
                 for r in found.records]
    return InputPartition(asset, partition) if versions_[0] != versions_[1] else None

