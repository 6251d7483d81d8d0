"""What answering cost, per answer and per run, read from the result rows (issue 33, item 4).

Per answer (`answer_efficiency`):

- `tool_calls`: a model-backed agent's tool calls as its usage counts them (every call the model asked for,
  refused ones included); the deterministic agent's retrievals (its trace entries, the hierarchical
  coordinator's bookkeeping entries excepted: they read nothing);
- `retrievals`: the traced retrievals, for every agent;
- `model_calls`, `input_tokens`, `output_tokens`: from the answer's usage; None for an agent without a model
  (the deterministic agent), and the tokens None too when any of the answer's calls came back without token
  usage: an unknown count is never shown as 0 tokens;
- `seconds`: wall time of the answer, from the timings sidecar (`timings.json`, never in the rows: it differs
  between identical runs).

Per run (`efficiency_summary`): the median, p90, total and count of each figure over the answers that have it,
or None when no answer has it. The counts go into `summary.json` (the same for identical runs); the seconds
(`seconds_summary`) into `timings.json`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from churn_assets.evaluation.stats import spread
from churn_assets.grounding.traces import COORDINATOR

COUNTED = ("model_calls", "tool_calls", "retrievals", "input_tokens", "output_tokens")


def answer_efficiency(row: Mapping[str, Any]) -> dict[str, int | None]:
    """The counted figures of one result row (see the module doc)."""
    traces = row.get("traces") or []
    retrievals = sum(1 for t in traces if isinstance(t, Mapping) and t.get("route") != COORDINATOR)
    usage = row.get("usage")
    if not isinstance(usage, Mapping):
        return {"model_calls": None, "tool_calls": retrievals, "retrievals": retrievals,
                "input_tokens": None, "output_tokens": None}
    known = not int(usage.get("unreported_calls") or 0)
    return {"model_calls": int(usage.get("calls") or 0), "tool_calls": int(usage.get("tool_calls") or 0),
            "retrievals": retrievals,
            "input_tokens": int(usage.get("input_tokens") or 0) if known else None,
            "output_tokens": int(usage.get("output_tokens") or 0) if known else None}


def efficiency_summary(rows: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Median, p90, total and count of each counted figure over the rows that have it (None: no row has it),
    and how many answers had calls without reported token usage."""
    per_answer = [answer_efficiency(r) for r in rows]
    out: dict[str, Any] = {"answers": len(rows)}
    for name in COUNTED:
        out[name] = spread([float(e[name]) for e in per_answer if e[name] is not None])  # type: ignore[arg-type]
    out["tokens_unreported_answers"] = sum(1 for r, e in zip(rows, per_answer, strict=True)
                                           if isinstance(r.get("usage"), Mapping) and e["input_tokens"] is None)
    return out


def seconds_summary(latency_ms_per_task: Mapping[str, float]) -> dict[str, float | int] | None:
    """Median, p90, total and count of the answers' wall seconds (the tasks answered by this process: a resumed
    run's earlier answers have no timing)."""
    return spread([float(ms) / 1000.0 for ms in latency_ms_per_task.values()])
