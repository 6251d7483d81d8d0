"""What the store-parity checks against the truth schema share: open the truth, compare, report.

Every store built by the fold (operational store, contract documents, RAG corpus, SaaS API) has a parity
check against the fold in its module; beside it sits a second check that compares the store with the truth
schema by the independent SQL (`evaluation/independent/stores.py`), which shares no code with the fold, so a
fold bug cannot pass both. Those checks are non-blocking: the fold parity stays the gate (it needs nothing but
the ledger file), and the second opinion reports under its own name what differs. A check that cannot run
(the world's truth schema is not loaded, or holds a format-1 ledger) says so with severity WARN, never passes.
"""

# No `from __future__ import annotations`: Dagster reads annotations at decoration time.
import datetime as dt
import time
from collections.abc import Callable
from typing import Any

import dagster as dg

from churn_assets.errors import UserFacingError
from churn_assets.evaluation.independent.stores import StoreTruth
from churn_assets.fabric.postgres import connection
from churn_assets.orchestration.assets.common import problems_description
from churn_assets.orchestration.resources import StateResource

MAX_PROBLEMS_SHOWN = 50


def not_checked(why: str, **metadata: Any) -> dg.AssetCheckResult:
    return dg.AssetCheckResult(passed=False, severity=dg.AssetCheckSeverity.WARN, description=f"not checked: {why}",
                               metadata={"checked": False, **metadata})


def truth_parity(state: StateResource, world_id: str, day: dt.date, what: str,
                 compare: Callable[[Any, StoreTruth], list[str]], *,
                 after: Callable[[], dict[str, Any]] | None = None, **metadata: Any) -> dg.AssetCheckResult:
    """Run `compare(conn, truth)` (the store against the truth schema as of `day`) and report its problems;
    `after()` adds metadata known once the comparison ran."""
    started = time.perf_counter()
    try:
        with connection(state.service_urls().warehouse, autocommit=True) as conn:
            truth = StoreTruth(conn, world_id, day)
            problems = compare(conn, truth)
    except UserFacingError as e:  # no truth layer, a format-1 ledger, an unreachable store: not a verdict
        return not_checked(str(e), **metadata)
    return dg.AssetCheckResult(
        passed=not problems,
        description=problems_description(problems) or f"{what}: in parity with {world_id}'s truth schema as of {day}",
        metadata={
            "checked": True,
            "truth_ledger_head": dg.MetadataValue.text(truth.head_hash or ""),
            "problem_count": len(problems),
            "problems": dg.MetadataValue.json(problems[:MAX_PROBLEMS_SHOWN]),
            "seconds": round(time.perf_counter() - started, 3),
            **metadata,
            **(after() if after is not None else {}),
        },
    )
