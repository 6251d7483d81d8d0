"""The figures of a sweep, from its record and its cells' results: plain tables (lists of dicts), no plotting.

- `cell_table`: one row per cell (evaluated and exposure-only) with its counts, plan and cost;
- `served_ages`: per cell and cached class, the age at T of the data served, from the days the answers'
  reads observed (evaluated cells) or the plan (exposure-only cells);
- `stale_by_class`: per evaluated cell, stale answers attributed to the classes they read stale;
- `parity_table`: the 2x2 (tiered / off) per gap (the `cache-age` sweep's gaps 26-31);
- `ttl_grid`: per TTL x rate multiplier x gap, exposure and prediction over seeds (min, mean, max);
- `budget_frontier`: per policy, stale answers against refresh rows;
- `seeds_summary`: the 2x2 per seed and a paired bootstrap 90% interval of off minus on;
- `repeats_table`: per evaluated cell of a sweep with repeats, the experiment's figures over them (mean
  accuracy and interval, pass^K, pass@K, stability, median tool calls and seconds, staleness awareness).
- `window_table`, `ttl_window`: the windows of arrival days (mean, 90% interval, range) of a sweep with windows;
- `arrival_averaged`: `cache-age`'s arrival-averaged curve (each gap the mean over its neighbouring gaps).
"""

from __future__ import annotations

import datetime as dt
import random
import statistics
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from churn_assets.evaluation.verdicts import STALE_VERDICTS, VERDICTS
from churn_assets.evaluation.window import bootstrap_mean
from churn_assets.sweeps.spec import SweepSpec
from churn_assets.unique_keys import load_json

BOOTSTRAP_SAMPLES = 5000
BOOTSTRAP_SEED = 0


def _policy_family(policy: str) -> str:
    """`uniform:8` -> `uniform`; `ttl:...` -> `ttl`; `tiered` -> `tiered`."""
    return policy.partition(":")[0]


def _policy_arg(policy: str) -> str:
    return policy.partition(":")[2]


def _uniform_ttl(policy: str) -> int | None:
    """The TTL of a `ttl:` policy giving every class the same TTL (None otherwise)."""
    if not policy.startswith("ttl:"):
        return None
    values = {int(item.split("=", 1)[1]) for item in policy[4:].split(",")}
    return values.pop() if len(values) == 1 else None


def result_rows(outcome: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The per-task rows of an evaluated cell (its results folder's `tasks.jsonl`)."""
    folder = outcome.get("results")
    if not folder:
        return []
    path = Path(folder) / "tasks.jsonl"
    if not path.exists():
        return []
    return [load_json(line, str(path)) for line in path.read_text().splitlines() if line.strip()]


def cell_table(record: Mapping[str, Any]) -> list[dict[str, Any]]:
    """One row per cell: evaluated cells from their outcomes, exposure-only cells from their rows."""
    labels = {}
    out = []
    for outcome in record.get("outcomes", {}).values():
        cell = outcome["cell"]
        labels[(cell["world_id"], cell["arm"], cell["policy"], cell["t_prime"])] = True
        row = _base(cell, "evaluated")
        row.update(status=outcome["status"], error=outcome.get("error", ""))
        if outcome["status"] == "done":
            verdicts = outcome.get("verdicts") or {}
            lo, hi = outcome.get("prediction_interval_90") or (None, None)
            row.update(stale_answers=outcome.get("stale_answers"), exposure=outcome.get("exposure"),
                       degenerate_exposure=outcome.get("degenerate_exposure"), prediction=outcome.get("prediction"),
                       prediction_lo=lo, prediction_hi=hi, accuracy=outcome.get("accuracy"),
                       mean_cost_units=outcome.get("mean_cost_units"), reused=outcome.get("reused"),
                       refreshes=outcome.get("refreshes"), refresh_rows=_total(outcome.get("refresh_rows")),
                       experiment_hash=outcome.get("experiment_hash"), results=outcome.get("results"),
                       **{v: verdicts.get(v, 0) for v in VERDICTS})
        out.append(row)
    for r in record.get("exposure_rows", []):
        cell = r["cell"]
        row = _base(cell, "exposure-only")
        lo, hi = r.get("prediction_interval_90") or (None, None)
        refreshes = sum(len([d for d in days if d > cell["t_prime"]]) for days in r.get("refresh_days", {}).values())
        row.update(status="done", exposure=r["exposure"], degenerate_exposure=r["degenerate_exposure"],
                   prediction=r["prediction"], prediction_lo=lo, prediction_hi=hi, refreshes=refreshes)
        out.append(row)
    return out


def _total(rows: Mapping[str, int | None] | None) -> int | None:
    if not rows:
        return None
    values = list(rows.values())
    return None if any(v is None for v in values) else sum(int(v) for v in values if v is not None)


def _age(t: dt.date, served_day: str | None) -> int | None:
    """Age at T of one served day; None when a class was served at several days or not at all."""
    return (t - dt.date.fromisoformat(served_day)).days if served_day else None


def _base(cell: Mapping[str, Any], kind: str) -> dict[str, Any]:
    t, t_prime = dt.date.fromisoformat(cell["t"]), dt.date.fromisoformat(cell["t_prime"])
    return {"kind": kind, "world_id": cell["world_id"], "world_label": cell.get("world_label", ""),
            "arm": cell["arm"], "policy": cell["policy"], "t_prime": cell["t_prime"], "t": cell["t"],
            "gap": (t - t_prime).days, "ttl": _uniform_ttl(cell["policy"])}


def served_ages(record: Mapping[str, Any], cached_classes: Sequence[str]) -> list[dict[str, Any]]:
    """(cell, class) -> age at T of the data served: observed in the reads of an evaluated cell (the answers'
    `served_vintage`, one day per class or the cell is flagged), planned for an exposure-only cell."""
    out = []
    for outcome in record.get("outcomes", {}).values():
        if outcome["status"] != "done":
            continue
        cell = outcome["cell"]
        t = dt.date.fromisoformat(cell["t"])
        seen: dict[str, set[str]] = defaultdict(set)
        for row in result_rows(outcome):
            for c, d in (row.get("served_vintage") or {}).items():
                if c in cached_classes and any(c in (tr.get("data_times") or {}) for tr in row.get("traces", [])):
                    seen[c].add(d)
        for c in cached_classes:
            days = sorted(seen.get(c, ()))
            planned = (outcome.get("planned_vintage") or {}).get(c)
            out.append({**_base(cell, "evaluated"), "entity_class": c, "source": "observed" if days else "planned",
                        "served_day": days[0] if len(days) == 1 else (planned if not days else ",".join(days)),
                        "age_days": _age(t, days[0] if len(days) == 1 else None if days else planned)})
    for r in record.get("exposure_rows", []):
        cell = r["cell"]
        t = dt.date.fromisoformat(cell["t"])
        for c in cached_classes:
            d = r["served_vintage"].get(c)
            out.append({**_base(cell, "exposure-only"), "entity_class": c, "source": "planned", "served_day": d,
                        "age_days": None if d is None else (t - dt.date.fromisoformat(d)).days})
    return out


def stale_by_class(record: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Per evaluated cell: stale answers (freshness + mixed-vintage) per class read stale (an answer that read
    two classes stale counts for both)."""
    out = []
    for outcome in record.get("outcomes", {}).values():
        if outcome["status"] != "done":
            continue
        counts: Counter[str] = Counter()
        for row in result_rows(outcome):
            if row.get("verdict") in STALE_VERDICTS:
                counts.update(row.get("classes_stale") or [])
        out.append({**_base(outcome["cell"], "evaluated"), "stale_answers": outcome.get("stale_answers"),
                    **{f"stale/{c}": n for c, n in sorted(counts.items())}})
    return out


def parity_table(cells: Iterable[Mapping[str, Any]], gaps: Sequence[int]) -> list[dict[str, Any]]:
    """The 2x2 per gap: stale answers and exposure of the tiered and the off cells (evaluated), per world."""
    by: dict[tuple[str, int], dict[str, Any]] = {}
    for c in cells:
        if c["kind"] != "evaluated" or c["status"] != "done" or c["gap"] not in gaps:
            continue
        row = by.setdefault((c["world_id"], c["gap"]), {"world_id": c["world_id"], "gap": c["gap"],
                                                       "t_prime": c["t_prime"]})
        side = "off" if c["policy"] == "off" else "tiered"
        row[f"{side}_stale"] = c["stale_answers"]
        row[f"{side}_exposure"] = c["exposure"]
    for row in by.values():
        if row.get("tiered_stale") and row.get("off_stale") is not None:
            row["off_over_tiered"] = round(row["off_stale"] / row["tiered_stale"], 2)
    return [by[k] for k in sorted(by)]


def ttl_grid(cells: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Per (TTL, rate multiplier, gap): exposure and prediction over the seeds (exposure-only cells), and the
    evaluated cells' stale answers beside their exposure (they must be equal)."""
    groups: dict[tuple[int, str, int], dict[str, list[Any]]] = defaultdict(lambda: defaultdict(list))
    for c in cells:
        if c.get("ttl") is None or c["status"] != "done":
            continue
        multiplier = _multiplier(c["world_label"])
        g = groups[(c["ttl"], multiplier, c["gap"])]
        if c["kind"] == "exposure-only":
            g["exposure"].append(c["exposure"])
            g["prediction"].append(c["prediction"])
        else:
            g["evaluated"].append((c["stale_answers"], c["exposure"]))
    out = []
    for (ttl, multiplier, gap), g in sorted(groups.items(), key=lambda kv: (kv[0][0], float(kv[0][1]), kv[0][2])):
        e, p = g.get("exposure", []), g.get("prediction", [])
        out.append({"ttl": ttl, "rate_multiplier": multiplier, "gap": gap, "seeds": len(e),
                    "exposure_min": min(e, default=None), "exposure_mean": round(statistics.fmean(e), 1) if e else None,
                    "exposure_max": max(e, default=None),
                    "prediction_mean": round(statistics.fmean(p), 1) if p else None,
                    "evaluated_stale": [s for s, _ in g.get("evaluated", [])],
                    "evaluated_exposure": [x for _, x in g.get("evaluated", [])],
                    "stale_equals_exposure": all(s == x for s, x in g.get("evaluated", [])) if g.get("evaluated")
                    else None})
    return out


def _multiplier(label: str) -> str:
    """"seed 42, rates x2" -> "2"."""
    _, sep, tail = label.rpartition("rates x")
    return tail if sep else "1"


def budget_frontier(cells: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Per evaluated cell: allocation (uniform, proportional, rate-matched, tier-shaped, tiered, off), budget,
    refreshes planned, rows copied, stale answers."""
    out = []
    for c in cells:
        if c["kind"] != "evaluated" or c["status"] != "done":
            continue
        family = _policy_family(c["policy"])
        out.append({"allocation": family, "budget": int(_policy_arg(c["policy"])) if _policy_arg(c["policy"])
                    .isdigit() else None, "policy": c["policy"], "arm": c["arm"], "world_id": c["world_id"],
                    "refreshes": c.get("refreshes"), "refresh_rows": c.get("refresh_rows"),
                    "stale_answers": c["stale_answers"], "exposure": c["exposure"]})
    return sorted(out, key=lambda r: (r["allocation"], r["budget"] or 0))


def seeds_summary(cells: Iterable[Mapping[str, Any]], windows: Mapping[str, int]) -> dict[str, Any]:
    """The 2x2 per world (seed) and, per window, the mean off-minus-on difference with a paired bootstrap 90%
    interval over seeds (seeded: the same cells give the same interval)."""
    by_world: dict[str, dict[str, Any]] = defaultdict(dict)
    gap_window = {g: w for w, g in windows.items()}
    for c in cells:
        if c["kind"] != "evaluated" or c["status"] != "done" or c["gap"] not in gap_window:
            continue
        side = "off" if c["policy"] == "off" else "tiered"
        by_world[c["world_id"]][f"{gap_window[c['gap']]} {side}"] = c["stale_answers"]
        by_world[c["world_id"]]["label"] = c["world_label"]
    differences: dict[str, dict[str, Any]] = {}
    rng = random.Random(BOOTSTRAP_SEED)
    for w in windows:
        diffs = [row[f"{w} off"] - row[f"{w} tiered"] for row in by_world.values()
                 if f"{w} off" in row and f"{w} tiered" in row]
        if not diffs:
            continue
        means = sorted(statistics.fmean(rng.choices(diffs, k=len(diffs))) for _ in range(BOOTSTRAP_SAMPLES))
        differences[w] = {"seeds": len(diffs), "mean_off_minus_on": round(statistics.fmean(diffs), 2),
                          "interval_90": [round(means[int(0.05 * BOOTSTRAP_SAMPLES)], 2),
                                          round(means[int(0.95 * BOOTSTRAP_SAMPLES) - 1], 2)],
                          "per_seed": diffs}
    return {"per_world": [{"world_id": k, **v} for k, v in sorted(by_world.items())], "differences": differences}


def repeats_table(record: Mapping[str, Any]) -> list[dict[str, Any]]:
    """One row per finished evaluated cell with its experiment's figures over the cell's repeats
    (`evaluation/repeats.py`, kept in the outcome as `repeats`)."""
    out = []
    for outcome in record.get("outcomes", {}).values():
        e = outcome.get("repeats")
        if outcome.get("status") != "done" or not e:
            continue
        cell = outcome["cell"]
        k = str(e["repeats"])
        lo, hi = e.get("accuracy_interval_90") or (None, None)
        eff = e.get("efficiency") or {}
        aware = e.get("staleness_awareness") or {}
        out.append({**_base(cell, "evaluated"), "repeats": e["repeats"], "accuracy_mean": e.get("accuracy_mean"),
                    "accuracy_lo": lo, "accuracy_hi": hi, "pass_hat_k": e["pass_hat_k"].get(k),
                    "pass_at_k": e["pass_at_k"].get(k), "stability": e.get("stability"),
                    "stale_answers_mean": e.get("stale_answers_mean"),
                    "median_tool_calls": (eff.get("tool_calls") or {}).get("median"),
                    "median_model_calls": (eff.get("model_calls") or {}).get("median"),
                    "median_seconds": (eff.get("seconds") or {}).get("median"),
                    "aware_share": aware.get("share_equals_oldest"),
                    "stale_revealed_share": aware.get("share_stale_revealed")})
    return sorted(out, key=lambda r: (r["world_id"], r["arm"], r["policy"], r["gap"]))
# ---------------------------------------------------------------------------------------------------
# windows of arrival days (issue 34)
# ---------------------------------------------------------------------------------------------------

ARRIVAL_HALF_WIDTH = 3  # cache-age's arrival-averaged curve: gap g is the mean over gaps g - 3 .. g + 3


def window_table(record: Mapping[str, Any]) -> list[dict[str, Any]]:
    """One row per window (world, arm, policy, T') of a sweep with windows (`SweepSpec.window_cells`): the
    exposure of each day (exposure-only cells: the task set sampled at T re-anchored to each day), its mean, 90%
    bootstrap interval over days and templates, min and max, the predicted mean (the mean of the days'
    predictions), the refreshes the schedule makes over (T', T], the rows the evaluated cell at T copied, and
    the evaluated window days with whether their stale answers equal their exposure."""
    spec = SweepSpec.from_json(record["spec"])
    days_of = {(t_prime.isoformat(), t.isoformat()) for t_prime, t, _ in spec.window_cells()}
    if not days_of:
        return []
    groups: dict[tuple[str, str, str, str], list[Mapping[str, Any]]] = defaultdict(list)
    labels: dict[tuple[str, str, str, str], str] = {}
    for r in record.get("exposure_rows", []):
        c = r["cell"]
        if (c["t_prime"], c["t"]) in days_of:
            key = (c["world_id"], c["arm"], c["policy"], c["t_prime"])
            groups[key].append(r)
            labels[key] = c.get("world_label", "")
    evaluated: dict[tuple[str, str, str, str], list[Mapping[str, Any]]] = defaultdict(list)
    for o in record.get("outcomes", {}).values():
        c = o["cell"]
        if o.get("status") == "done" and (c["t_prime"], c["t"]) in days_of:
            evaluated[(c["world_id"], c["arm"], c["policy"], c["t_prime"])].append(o)
    out = []
    for key, rows in sorted(groups.items()):
        world_id, arm, policy, t_prime = key
        rows = sorted(rows, key=lambda r: r["cell"]["t"])
        if len(rows) < spec.window_days:
            continue  # a window whose days are not all computed yet
        templates = sorted({t for r in rows for t in r.get("exposed_by_template", {})})
        matrix = [[float(r.get("exposed_by_template", {}).get(t, 0)) for t in templates] for r in rows]
        per_day = [r["exposure"] for r in rows]
        lo, hi = bootstrap_mean(matrix) if templates else (0.0, 0.0)
        last = rows[-1]
        at_t = [o for o in evaluated.get(key, []) if o["cell"]["t"] == last["cell"]["t"]]
        checked = evaluated.get(key, [])
        family = _policy_family(policy)
        out.append({
            "world_id": world_id, "world_label": labels[key], "rate_multiplier": _multiplier(labels[key]),
            "arm": arm, "policy": policy, "allocation": "off" if policy == "off" else family,
            "budget": int(_policy_arg(policy)) if _policy_arg(policy).isdigit() else None,
            "ttl": _uniform_ttl(policy), "t_prime": t_prime, "first": rows[0]["cell"]["t"], "t": last["cell"]["t"],
            "days": len(rows), "exposure_mean": round(statistics.fmean(per_day), 2),
            "exposure_lo": round(lo, 2), "exposure_hi": round(hi, 2), "exposure_min": min(per_day),
            "exposure_max": max(per_day), "per_day": per_day,
            "prediction_mean": round(statistics.fmean(float(r["prediction"]) for r in rows), 2),
            "refreshes": sum(len([d for d in days if d > t_prime]) for days in last.get("refresh_days", {}).values()),
            "refresh_rows": _total(at_t[0].get("refresh_rows")) if at_t else None,
            "evaluated_days": [o["cell"]["t"] for o in sorted(checked, key=lambda o: o["cell"]["t"])],
            "stale_equals_exposure": all(o.get("stale_answers") == o.get("exposure") for o in checked)
            if checked else None,
        })
    return out


def ttl_window(rows: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The windows of one-TTL policies per (TTL, rate multiplier): the mean over seeds of the window means, the
    seeds' lowest and highest window means, the union of their 90% intervals, every seed's per-day values."""
    groups: dict[tuple[int, str], list[Mapping[str, Any]]] = defaultdict(list)
    for r in rows:
        if r.get("ttl") is not None:
            groups[(r["ttl"], r["rate_multiplier"])].append(r)
    out = []
    for (ttl, multiplier), g in sorted(groups.items(), key=lambda kv: (kv[0][0], float(kv[0][1]))):
        means = [r["exposure_mean"] for r in g]
        out.append({"ttl": ttl, "rate_multiplier": multiplier, "seeds": len(g),
                    "window_mean": round(statistics.fmean(means), 1), "seed_min": min(means),
                    "seed_max": max(means), "band_lo": min(r["exposure_lo"] for r in g),
                    "band_hi": max(r["exposure_hi"] for r in g),
                    "prediction_mean": round(statistics.fmean(r["prediction_mean"] for r in g), 1),
                    "per_day": [x for r in g for x in r["per_day"]]})
    return out


def arrival_averaged(cells: Iterable[Mapping[str, Any]], half_width: int = ARRIVAL_HALF_WIDTH
                     ) -> list[dict[str, Any]]:
    """Per evaluated (world, arm, policy) series over gaps (the `cache-age` sweep): at each gap g the mean, min and
    max of the stale answers of the gaps g - `half_width` .. g + `half_width` that were evaluated (fewer at the
    ends: `gaps` says how many), beside the single-day value. Moving T' by a few days at a fixed T moves the
    question's arrival against the refresh schedule as moving T would: the curve averages the schedule's phase
    out (a hot class's 2-day cycle), not the world's drift."""
    series: dict[tuple[str, str, str], dict[int, int]] = defaultdict(dict)
    for c in cells:
        if c["kind"] == "evaluated" and c["status"] == "done" and c.get("stale_answers") is not None:
            series[(c["world_id"], c["arm"], c["policy"])][c["gap"]] = c["stale_answers"]
    out = []
    for (world_id, arm, policy), by_gap in sorted(series.items()):
        for gap in sorted(by_gap):
            near = [by_gap[g] for g in range(gap - half_width, gap + half_width + 1) if g in by_gap]
            out.append({"world_id": world_id, "arm": arm, "policy": policy, "gap": gap,
                        "stale_answers": by_gap[gap], "arrival_mean": round(statistics.fmean(near), 2),
                        "arrival_min": min(near), "arrival_max": max(near), "gaps": len(near)})
    return out
