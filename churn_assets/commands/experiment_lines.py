"""The lines `churnbench run`, `paper`, `llm try` and `results show` print: a run's figures on one line
(`result_line`), and for an experiment's summary over its repeats (`evaluation/repeats.py`) the repeats'
statistics (K > 1), efficiency per task, staleness awareness."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

EFFICIENCY_NAMES = (("tool_calls", "tool calls"), ("model_calls", "model calls"), ("input_tokens", "input tokens"),
                    ("output_tokens", "output tokens"), ("seconds", "seconds"))


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.1f}%"


def _num(value: float) -> str:
    return f"{value:g}"


def repeats_line(e: Mapping[str, Any]) -> str | None:
    """Mean accuracy with its interval, pass^K, pass@K, stability and stale answers per repeat (None: K = 1)."""
    k = int(e["repeats"])
    if k < 2:
        return None
    lo, hi = e.get("accuracy_interval_90") or (None, None)
    key = str(k)
    return (f"repeats {k}: accuracy mean {_pct(e.get('accuracy_mean'))} [90% {_pct(lo)}-{_pct(hi)}, clustered by "
            f"template], pass^{k} {_pct(e['pass_hat_k'].get(key))}, pass@{k} {_pct(e['pass_at_k'].get(key))}, "
            f"stability {_pct(e.get('stability'))} ({e.get('stable_tasks')}/{e.get('tasks')} tasks answered alike); "
            f"stale answers per repeat {e.get('stale_answers_per_repeat')}")


def efficiency_line(e: Mapping[str, Any]) -> str:
    """Median (p90) per task of each counted figure; absent ones named as absent, never 0."""
    eff = e.get("efficiency") or {}
    parts, absent = [], []
    for name, label in EFFICIENCY_NAMES:
        s = eff.get(name)
        if s is None:
            absent.append(label)
        else:
            parts.append(f"{label} {_num(s['median'])} (p90 {_num(s['p90'])})")
    line = "efficiency per task, median (p90): " + (", ".join(parts) or "-")
    counted = [label for label in absent if label != "seconds"]
    if counted:
        line += f"; no {', '.join(counted)}" + (" (the agent calls no model)" if eff.get("model_calls") is None
                                                else "")
    if "seconds" in absent:
        line += "; seconds not timed (answers resumed from a checkpoint carry no timing)"
    if eff.get("tokens_unreported_answers"):
        line += f"; {eff['tokens_unreported_answers']} answer(s) with calls the endpoint reported no tokens for"
    return line


def awareness_line(e: Mapping[str, Any]) -> str:
    a = e.get("staleness_awareness") or {}
    if not a.get("applicable"):
        return "staleness awareness: n/a (no answer states the as-of day of its data)"
    return (f"staleness awareness: stated as-of day = oldest day read {a['stated_equals_oldest_observed']}/"
            f"{a['answers']} ({_pct(a.get('share_equals_oldest'))}); stale answers revealing it (stated day < T) "
            f"{a['stale_revealed']}/{a['stale_answers']} ({_pct(a.get('share_stale_revealed'))}); stated "
            f"{a['stated']}/{a['answers']}")


def experiment_lines(e: Mapping[str, Any] | None) -> list[str]:
    """Every line for an experiment summary (none when there is none: a run recorded before issue 33)."""
    if not e:
        return []
    first = repeats_line(e)
    return [*([first] if first else []), efficiency_line(e), awareness_line(e)]


def verdict_label(verdict: str) -> str:
    """A verdict's name in a result line: the first word of the verdict (`budget_exhausted`: budget)."""
    return verdict.split("_")[0]


def result_line(s: dict[str, Any]) -> str:
    """A run's figures on one line: the count of every verdict of `verdicts.VERDICTS`, in its order (a verdict
    absent from a summary recorded before it existed counts 0), exposure, prediction."""
    from churn_assets.evaluation.verdicts import VERDICTS

    v = s["verdicts"]
    counts = "  ".join(f"{verdict_label(name)} {v.get(name, 0):3d}" for name in VERDICTS)
    return (f"accuracy {100 * (s['accuracy'] or 0):5.1f}%  {counts}  "
            f"exposure {s['exposure']}  prediction {s['prediction']} {interval(s)}")


def interval(s: dict[str, Any]) -> str:
    """The prediction's 90% interval; `*` when it rests on too short a history (`exposure.MIN_HISTORY_DAYS`)."""
    from churn_assets.evaluation.exposure import MIN_HISTORY_DAYS

    lo_hi, history = s.get("prediction_interval_90"), s.get("prediction_history_days")
    short = "*" if history is not None and history < MIN_HISTORY_DAYS else ""
    return f"[{lo_hi[0]}-{lo_hi[1]}]{short}" if lo_hi else ""
