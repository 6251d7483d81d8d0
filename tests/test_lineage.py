"""What an evaluation read, as input partitions (`orchestration/lineage.py`), on plain values: each store's reads
name their partition, reads of one partition through one table are one row, and the judge names every partition
whose version moved."""

from __future__ import annotations

from churn_assets.orchestration.lineage import InputPartition, judge, link_labels, read_rows, versions

W = "default-s5-140a74"
STAGED = {"prices": "staged_prices", "assignments": "staged_assignments"}


def _row(*reads: dict[str, str]) -> dict[str, object]:
    return {"traces": [{"reads": list(reads)}]}


def _read(store: str, table: str, day: str, observed_hash: str = "", entity_class: str = "prices") -> dict[str, str]:
    return {"store": store, "table": table, "entity_class": entity_class, "observed_day": day,
            "observed_hash": observed_hash}


def test_each_store_names_the_partition_it_read() -> None:
    rows = [_row(_read("staging", "default_s5_140a74_staging.prices", "2024-01-28", "aa"),
                 _read("warehouse", "default_s5_140a74_analytics.licenses_as_of", "2024-01-30")),
            _row(_read("staging", "default_s5_140a74_staging.prices", "2024-01-28", "aa"),
                 _read("operational", "default_s5_140a74_20240130.users", "2024-01-30", "u1", "user_status"),
                 _read("saas", "GET /v1/tenants/x/tickets", "2024-01-30", "s1", "tickets"),
                 _read("saas", "GET /v1/tenants/x/tickets", "2024-01-30", "s2", "tickets"),
                 _read("vector_index", "default_s5_140a74_staging.vector_index_chunks", "2024-01-28", "v", "c"),
                 _read("documents", "/state/contracts/2024-01-30", "2024-01-30", "d", "contract_terms"))]
    found = {(str(r.input), r.table, r.observed_hash, r.reads) for r in read_rows(rows, W, "2024-01-30", STAGED)}
    assert found == {
        (f"staged_prices[2024-01-28|{W}]", "default_s5_140a74_staging.prices", "aa", 2),
        (f"analytics/licenses_as_of[{W}]", "default_s5_140a74_analytics.licenses_as_of", "", 1),
        (f"operational_store[2024-01-30|{W}]", "default_s5_140a74_20240130.users", "u1", 1),
        (f"warehouse_truth[{W}]", "GET /v1/tenants/x/tickets", "2 hashes (one per query)", 2),
        (f"vector_index[2024-01-28|{W}]", "default_s5_140a74_staging.vector_index_chunks", "v", 1),
        (f"contract_documents[2024-01-30|{W}]", "/state/contracts/2024-01-30", "d", 1),
        (f"ledger[{W}]", "ledger.jsonl", "", 0),  # gold
        (f"task_set[2024-01-30|{W}]", "tasks.jsonl", "", 0),  # the questions
    }


def test_the_judge_names_every_partition_whose_version_moved() -> None:
    recorded = {"staged_prices[2024-01-28|w]": "aa", "ledger[w]": "h1", "task_set[2024-01-30|w]": "t1"}
    assert judge(recorded, dict(recorded)) == []
    moved = judge(recorded, {**recorded, "staged_prices[2024-01-28|w]": "bb", "ledger[w]": None})
    assert moved == ["ledger[w]: read at version h1, no longer materialized",
                     "staged_prices[2024-01-28|w]: read at version aa, now version bb"]


def test_a_partition_links_to_its_page_and_versions_are_keyed_by_it() -> None:
    p = InputPartition("staged_prices", "2024-01-28|default-s5-140a74")
    assert p.link() == "/assets/staged_prices?view=partitions&partition=2024-01-28%7Cdefault-s5-140a74"
    rows = read_rows([], W, "2024-01-30", STAGED)
    assert versions(rows) == {f"ledger[{W}]": "", f"task_set[2024-01-30|{W}]": ""}


def test_link_labels_leave_out_the_world_every_input_shares_and_stay_unique() -> None:
    inputs = [InputPartition("staged_cost_center_membership", f"2024-04-23|{W}"),
              InputPartition("staged_user_status", f"2024-04-27|{W}"), InputPartition("ledger", W)]
    assert link_labels(inputs) == ["read/staged_cost_center_membership 2024-04-23",
                                   "read/staged_user_status 2024-04-27", "read/ledger"]
    # two worlds' partitions of one asset and day (never one run's reads, but a label must stay unique)
    two = [InputPartition("ledger", W), InputPartition("ledger", "other-s1-abcdef")]
    assert link_labels(two) == [f"read/ledger {W}", "read/ledger other-s1-abcdef"]
