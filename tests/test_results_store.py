"""Results files: keyed by experiment hash and code version, never overwritten, resumable."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from churn_assets.evaluation.results import (
    ResultsError,
    ResultsStore,
    RunKey,
    code_version,
    experiment_hash,
)


def _key(code: str = "git-abc123def456", spec: dict | None = None) -> RunKey:
    spec = spec or {"world": "w", "arm": "grounding", "policy": "tiered", "t_prime": "2024-03-29", "t": "2024-04-27"}
    return RunKey("default-s42-aaaaaa", "w__grounding__tiered__tp20240329__t20240427__det__default",
                  experiment_hash(spec), code)


def _row(i: int, verdict: str = "correct") -> dict:
    return {"task_id": f"t{i:03d}", "template": "spend_of_cost_center", "task_tier": 2, "verdict": verdict,
            "question_text": f"q{i}", "answer": i, "gold_at_t": i + (verdict != "correct"), "gold_served": i}


def test_experiment_hash_is_order_independent_and_sensitive() -> None:
    a = experiment_hash({"arm": "naive", "t": "2024-04-27"})
    assert a == experiment_hash({"t": "2024-04-27", "arm": "naive"})
    assert a != experiment_hash({"arm": "naive", "t": "2024-04-26"})
    assert len(a) == 16


def test_code_version_names_git_or_package() -> None:
    v = code_version()
    assert v.startswith(("git-", "pkg-"))


def test_write_finish_and_never_overwrite(tmp_path: Path) -> None:
    store = ResultsStore(tmp_path)
    key = _key()
    w = store.open_run(key)
    for i in range(3):
        w.append(_row(i, "freshness_error" if i == 1 else "correct"))
    out = w.finish(["t000", "t001", "t002"], {"correct": 2, "freshness_error": 1}, {"latency_s": 0.1})
    assert store.is_complete(key)
    assert [r["task_id"] for r in store.read_tasks(key)] == ["t000", "t001", "t002"]
    stale = (out / "stale.csv").read_text().splitlines()
    assert len(stale) == 2 and stale[1].startswith("t001,")
    assert json.loads((out / "timings.json").read_text()) == {"latency_s": 0.1}
    with pytest.raises(ResultsError, match="never overwritten"):
        store.open_run(key)


def test_changed_code_version_writes_beside_never_over(tmp_path: Path) -> None:
    store = ResultsStore(tmp_path)
    old, new = _key("git-000000000001"), _key("git-000000000002")
    w = store.open_run(old)
    w.append(_row(0))
    w.finish(["t000"], {"correct": 1}, {})
    w2 = store.open_run(new)
    assert w2.completed == {}  # a different code version never resumes another's checkpoint
    assert store.run_dir(old) != store.run_dir(new)


def test_resume_from_checkpoint_with_torn_last_line(tmp_path: Path) -> None:
    store = ResultsStore(tmp_path)
    key = _key()
    w = store.open_run(key)
    w.append(_row(0))
    w.append(_row(1))
    with (store.run_dir(key) / "tasks.partial.jsonl").open("a") as fh:
        fh.write('{"task_id": "t002", "ans')  # interrupted mid-write
    resumed = store.open_run(key)
    assert sorted(resumed.completed) == ["t000", "t001"]
    resumed.append(_row(2))
    resumed.finish(["t000", "t001", "t002"], {"correct": 3}, {})
    assert len(store.read_tasks(key)) == 3


def test_finish_refuses_unanswered_tasks(tmp_path: Path) -> None:
    w = ResultsStore(tmp_path).open_run(_key())
    w.append(_row(0))
    with pytest.raises(ResultsError, match="1 tasks unanswered"):
        w.finish(["t000", "t001"], {}, {})
