"""Calibration of the exposure predictor against measured exposure (issue 19), per day and over windows (issue 34).

    python bench/calibrate_predictor.py [--seeds 42,7,11] [--gaps 1-35] [--out docs/figures] [--json]
    python bench/calibrate_predictor.py --window 28 [--seeds 42,7,11] [--gaps 1-35] [--out docs/figures] [--json]

For each seed's default world (T = 2024-04-27, the default 180-task set at T), each gap (T' = T - gap) and each
policy (tiered, off), it computes the exposure oracle (tasks whose gold at T differs from gold under the served
vintage, informative served gold only) and the prediction (`evaluation/exposure.py`: per-task answer-change rates
measured on the ledger before T' only, and a 90% interval from resampled measured days). Nothing is fitted on
the evaluated cells. It prints a table per cell and the summary (cells inside the interval, mean absolute error,
mean bias), and writes `predictor_calibration.csv`, `.json` and `.png` into `--out`.

With `--window N` each cell is a window of N arrival days ending at T instead (`evaluation/window.py`): gap g
names the window whose first day is g days after T' (T' = T - (N - 1) - g: its days are at gaps g .. g + N - 1;
g = 2 is the paper's D+28 window), the task set sampled at T re-anchored to each day. It compares the measured
window mean with the predicted one and its 90% interval (measured days resampled, one draw per calendar day for
every day of the window), and writes `predictor_window_calibration.csv`, `.json` and `.png`.
"""

from __future__ import annotations

import argparse
import csv
import datetime as dt
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

T = dt.date(2024, 4, 27)
DEFAULT_SEEDS = (42, 7, 11)


def parse_gaps(text: str) -> list[int]:
    out: list[int] = []
    for part in text.split(","):
        lo, _, hi = part.partition("-")
        out += list(range(int(lo), int(hi or lo) + 1))
    return out


def default_world(seed: int) -> tuple[Any, Any, dt.date, Any]:
    """The default world of a seed simulated in memory: its config, its ledger's records (packed), its first day and
    a gold resolver over them (the calibration's, the decomposition's and the analytic anchor's worlds)."""
    from churn_assets.tasks.gold import GoldResolver
    from churn_assets.world.config import load_config
    from churn_assets.world.ledger import load_ledger
    from churn_assets.world.simulator import generate_ledger

    config = load_config(seed=seed)
    with tempfile.TemporaryDirectory(prefix=f"world-s{seed}-") as tmp:
        generate_ledger(config, Path(tmp))
        records = load_ledger(Path(tmp), packed=True).records
    return config, records, dt.date.fromisoformat(records[0]["at"]), GoldResolver(records)


def default_world_tasks(seed: int) -> tuple[Any, Any, dt.date, Any, Any]:
    """`default_world(seed)` and its default task set sampled at T (every calibration script's seed loop starts so)."""
    from churn_assets.tasks.generator import generate_task_set

    config, records, start, resolver = default_world(seed)
    tasks = generate_task_set(records, world_id=config.world_id, anchor=T, resolver=resolver).tasks
    return config, records, start, resolver, tasks


def write_csv(path: Path, rows: list[dict[str, Any]]) -> None:
    """Rows as CSV, the first row's keys as the header."""
    with path.open("w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(rows[0]), lineterminator="\n")
        writer.writeheader()
        writer.writerows(rows)


# A bound moved by a difference of CSV figures (rounded to 2 decimals) can land a float's error away from a value
# it equals, so `inside` counts a value within this of a bound as on it (issue 34's review found such a tie).
TIE = 1e-9


def inside(value: float, lo: float, hi: float) -> bool:
    """`value` in [lo, hi], a value within TIE of a bound counting as on it."""
    return lo - TIE <= value <= hi + TIE


def markdown_table(rows: list[dict[str, Any]], cols: list[str]) -> str:
    """Rows as a Markdown table of `cols`."""
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    lines += ["| " + " | ".join(str(r[c]) for c in cols) + " |" for r in rows]
    return "\n".join(lines)


def calibrate(seeds: list[int], gaps: list[int], echo: Any = print) -> list[dict[str, Any]]:
    from churn_assets.evaluation.exposure import run_exposure
    from churn_assets.freshness.planning import served_vintage
    from churn_assets.freshness.policies import Off, Tiered
    from churn_assets.grounding.registry import load_registry

    registry = load_registry()
    rows: list[dict[str, Any]] = []
    for seed in seeds:
        started = time.perf_counter()
        config, records, start, resolver, tasks = default_world_tasks(seed)
        for gap in gaps:
            t_prime = T - dt.timedelta(days=gap)
            for policy in (Tiered(), Off()):
                vintage = served_vintage(registry, t_prime, T, policy)
                run = run_exposure(records, tasks, anchor=T, t_prime=t_prime, vintage=vintage, start=start,
                                   resolver=resolver)
                lo, hi = run.interval()
                ilo, ihi = run.independent_interval()
                rows.append({"seed": seed, "world": config.world_id, "gap": gap, "t_prime": t_prime.isoformat(),
                             "policy": policy.policy_id, "exposure": run.exposure,
                             "degenerate_exposure": run.degenerate_exposure,
                             "prediction": round(run.prediction, 2), "interval_lo": lo, "interval_hi": hi,
                             "inside": lo <= run.exposure <= hi, "poisson_binomial_lo": ilo,
                             "poisson_binomial_hi": ihi, "inside_poisson_binomial": ilo <= run.exposure <= ihi})
        echo(f"seed {seed}: {len(gaps) * 2} cells in {time.perf_counter() - started:.0f} s")
    return rows


def calibrate_windows(seeds: list[int], gaps: list[int], days: int, echo: Any = print,
                      ends: tuple[dt.date, ...] = (T,)) -> list[dict[str, Any]]:
    """One row per seed x window end x first gap x policy: the measured window mean and the predicted one with
    its interval."""
    from churn_assets.evaluation.exposure import change_rates
    from churn_assets.grounding.registry import load_registry
    from churn_assets.tasks.generator import generate_task_set

    registry = load_registry()
    rows: list[dict[str, Any]] = []
    for seed in seeds:
        started = time.perf_counter()
        config, records, start, resolver = default_world(seed)
        for end in ends:
            tasks = generate_task_set(records, world_id=config.world_id, anchor=end, resolver=resolver).tasks
            rates = change_rates(records, tasks, start=start, anchor=end)  # to T - 1: serves every T' before T
            rows += _windows_of(seed, config, records, resolver, tasks, rates, registry, start, end, gaps, days)
        echo(f"seed {seed}: {len(gaps) * len(ends) * 2} windows of {days} days in "
             f"{time.perf_counter() - started:.0f} s")
    return rows


def _windows_of(seed: int, config: Any, records: Any, resolver: Any, tasks: Any, rates: Any, registry: Any,
                start: dt.date, end: dt.date, gaps: list[int], days: int) -> list[dict[str, Any]]:
    from churn_assets.evaluation.window import Window, policy_windows

    rows = []
    for gap in gaps:
        window = Window(end - dt.timedelta(days=days - 1 + gap), days, end)
        for w in policy_windows(records, tasks, window, ["tiered", "off"], registry, start=start,
                                calendar_days=config.days, resolver=resolver, rates=rates):
            lo, hi = w.prediction_interval_90 or (0.0, 0.0)
            mean = w.exposure.mean
            rows.append({"seed": seed, "world": config.world_id, "first_gap": gap,
                         "t_prime": window.t_prime.isoformat(), "first": window.first.isoformat(),
                         "t": end.isoformat(), "days": days, "policy": w.policy_id,
                         "window_mean": round(mean, 2), "day_min": w.exposure.low, "day_max": w.exposure.high,
                         "measured_lo": round(w.exposure.interval_90[0], 2),
                         "measured_hi": round(w.exposure.interval_90[1], 2),
                         "prediction": round(w.prediction or 0.0, 2), "interval_lo": round(lo, 2),
                         "interval_hi": round(hi, 2), "inside": lo <= round(mean, 2) <= hi})
    return rows


def window_summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    n = len(rows)
    return {"cells": n, "inside": sum(r["inside"] for r in rows),
            "hit_rate": round(sum(r["inside"] for r in rows) / n, 3) if n else None,
            "mean_absolute_error": round(sum(abs(r["prediction"] - r["window_mean"]) for r in rows) / n, 2)
            if n else None,
            "mean_bias": round(sum(r["prediction"] - r["window_mean"] for r in rows) / n, 2) if n else None}


def plot_windows(rows: list[dict[str, Any]], path: Path, days: int) -> None:
    """One panel per seed and policy: against the first gap (one window end), or against the window's end."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    seeds = sorted({r["seed"] for r in rows})
    policies = ["tiered", "off"]
    fig, axes = plt.subplots(len(policies), len(seeds), figsize=(4.2 * len(seeds), 6.4), sharex=True, squeeze=False)
    for i, policy in enumerate(policies):
        for j, seed in enumerate(seeds):
            ax = axes[i][j]
            by_end = len({r["t"] for r in rows}) > 1
            x_of = (lambda r: dt.date.fromisoformat(r["t"]).toordinal() - T.toordinal()) if by_end \
                else (lambda r: r["first_gap"])
            cells = sorted((r for r in rows if r["seed"] == seed and r["policy"] == policy), key=x_of)
            gaps = [x_of(r) for r in cells]
            ax.fill_between(gaps, [r["interval_lo"] for r in cells], [r["interval_hi"] for r in cells],
                            color="tab:blue", alpha=0.2, label="predicted 90% interval of the window mean")
            ax.plot(gaps, [r["prediction"] for r in cells], color="tab:blue", label="predicted window mean")
            inside = [r for r in cells if r["inside"]]
            outside = [r for r in cells if not r["inside"]]
            ax.scatter([x_of(r) for r in inside], [r["window_mean"] for r in inside], s=14, color="black",
                       label="measured window mean")
            ax.scatter([x_of(r) for r in outside], [r["window_mean"] for r in outside], s=22,
                       color="tab:red", marker="x", label="measured, outside the interval")
            hits = sum(r["inside"] for r in cells)
            ax.set_title(f"seed {seed}, {policy}: {hits}/{len(cells)} inside", fontsize=10)
            if i == len(policies) - 1:
                ax.set_xlabel(f"the window's last day, days from {T}" if by_end
                              else f"first gap g of the window (its days at gaps g .. g + {days - 1})")
            if j == 0:
                ax.set_ylabel(f"exposed tasks, mean over {days} days")
            ax.grid(alpha=0.3)
    handles, labels = axes[0][0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=4, fontsize=9, frameon=False)
    s = window_summary(rows)
    ends = sorted({r["t"] for r in rows})
    where = f"ending at {ends[0]}" if len(ends) == 1 else f"ending at {len(ends)} days from {ends[0]} to {ends[-1]}"
    fig.suptitle(f"Window predictor against the measured window mean ({days} arrival days {where}; default world "
                 f"per seed): {s['inside']}/{s['cells']} inside the 90% interval, mean absolute error "
                 f"{s['mean_absolute_error']}", fontsize=11)
    fig.tight_layout(rect=(0, 0.05, 1, 0.95))
    fig.savefig(path, dpi=110)
    plt.close(fig)


def summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    n = len(rows)
    return {"cells": n, "inside": sum(r["inside"] for r in rows),
            "hit_rate": round(sum(r["inside"] for r in rows) / n, 3) if n else None,
            "inside_poisson_binomial": sum(r["inside_poisson_binomial"] for r in rows),
            "mean_absolute_error": round(sum(abs(r["prediction"] - r["exposure"]) for r in rows) / n, 2) if n else None,
            "mean_bias": round(sum(r["prediction"] - r["exposure"] for r in rows) / n, 2) if n else None}


def plot(rows: list[dict[str, Any]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    seeds = sorted({r["seed"] for r in rows})
    policies = ["tiered", "off"]
    fig, axes = plt.subplots(len(policies), len(seeds), figsize=(4.2 * len(seeds), 6.4), sharex=True, squeeze=False)
    for i, policy in enumerate(policies):
        for j, seed in enumerate(seeds):
            ax = axes[i][j]
            cells = sorted((r for r in rows if r["seed"] == seed and r["policy"] == policy), key=lambda r: r["gap"])
            gaps = [r["gap"] for r in cells]
            ax.fill_between(gaps, [r["interval_lo"] for r in cells], [r["interval_hi"] for r in cells],
                            color="tab:blue", alpha=0.2, label="predicted 90% interval")
            ax.plot(gaps, [r["prediction"] for r in cells], color="tab:blue", label="prediction")
            inside = [r for r in cells if r["inside"]]
            outside = [r for r in cells if not r["inside"]]
            ax.scatter([r["gap"] for r in inside], [r["exposure"] for r in inside], s=14, color="black",
                       label="measured exposure")
            ax.scatter([r["gap"] for r in outside], [r["exposure"] for r in outside], s=22, color="tab:red",
                       marker="x", label="measured, outside the interval")
            hits = sum(r["inside"] for r in cells)
            ax.set_title(f"seed {seed}, {policy}: {hits}/{len(cells)} inside", fontsize=10)
            if i == len(policies) - 1:
                ax.set_xlabel("gap T - T' (days)")
            if j == 0:
                ax.set_ylabel("exposed tasks (of 180)")
            ax.grid(alpha=0.3)
    handles, labels = axes[0][0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=4, fontsize=9, frameon=False)
    s = summary(rows)
    fig.suptitle(f"Exposure predictor against measured exposure (T = {T}; default world per seed): "
                 f"{s['inside']}/{s['cells']} inside the 90% interval, mean absolute error {s['mean_absolute_error']}",
                 fontsize=11)
    fig.tight_layout(rect=(0, 0.05, 1, 0.95))
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", default=",".join(map(str, DEFAULT_SEEDS)))
    parser.add_argument("--gaps", default="1-35")
    parser.add_argument("--out", type=Path, default=Path("docs/figures"))
    parser.add_argument("--json", action="store_true", help="print the summary as JSON")
    parser.add_argument("--window", type=int, default=0, help="calibrate the window predictor over N arrival days")
    parser.add_argument("--ends", default=T.isoformat(), help="with --window: comma-separated last days of the "
                        "windows (default: T)")
    parser.add_argument("--name", default="predictor_window_calibration", help="with --window: the files' name")
    args = parser.parse_args(argv)
    seeds = [int(s) for s in args.seeds.split(",")]
    if args.window:
        ends = tuple(dt.date.fromisoformat(e) for e in args.ends.split(","))
        return main_windows(seeds, parse_gaps(args.gaps), args.window, args.out, args.json, ends, args.name)
    rows = calibrate(seeds, parse_gaps(args.gaps), echo=lambda m: print(m, file=sys.stderr, flush=True))
    args.out.mkdir(parents=True, exist_ok=True)
    write_csv(args.out / "predictor_calibration.csv", rows)
    result = {"t": T.isoformat(), "seeds": seeds, "summary": summary(rows),
              "per_seed": {s: summary([r for r in rows if r["seed"] == s]) for s in seeds}, "cells": rows}
    (args.out / "predictor_calibration.json").write_text(json.dumps(result, indent=1) + "\n")
    plot(rows, args.out / "predictor_calibration.png")
    if args.json:
        print(json.dumps({k: v for k, v in result.items() if k != "cells"}, indent=1))
    else:
        for r in rows:
            print(f"seed {r['seed']:>3} gap {r['gap']:>2} {r['policy']:<6} exposure {r['exposure']:>3} "
                  f"prediction {r['prediction']:>6.1f} [{r['interval_lo']:>3}, {r['interval_hi']:>3}]"
                  f"{'' if r['inside'] else '  OUTSIDE'}")
        s = result["summary"]
        print(f"{s['inside']}/{s['cells']} cells inside the 90% interval ({100 * s['hit_rate']:.0f}%), mean absolute "
              f"error {s['mean_absolute_error']}, mean bias {s['mean_bias']:+}; inside the Poisson-binomial "
              f"interval of independent tasks: {s['inside_poisson_binomial']}/{s['cells']}")
        for seed, ps in result["per_seed"].items():
            print(f"  seed {seed}: {ps['inside']}/{ps['cells']}, MAE {ps['mean_absolute_error']}, "
                  f"bias {ps['mean_bias']:+}, Poisson-binomial {ps['inside_poisson_binomial']}/{ps['cells']}")
    return 0


def main_windows(seeds: list[int], gaps: list[int], days: int, out: Path, as_json: bool, ends: tuple[dt.date, ...],
                 name: str) -> int:
    rows = calibrate_windows(seeds, gaps, days, echo=lambda m: print(m, file=sys.stderr, flush=True), ends=ends)
    out.mkdir(parents=True, exist_ok=True)
    write_csv(out / f"{name}.csv", rows)
    result: dict[str, Any] = {"ends": [e.isoformat() for e in ends], "days": days, "seeds": seeds,
                              "summary": window_summary(rows),
              "per_seed": {s: window_summary([r for r in rows if r["seed"] == s]) for s in seeds},
              "per_policy": {p: window_summary([r for r in rows if r["policy"] == p]) for p in ("tiered", "off")},
              "cells": rows}
    (out / f"{name}.json").write_text(json.dumps(result, indent=1) + "\n")
    plot_windows(rows, out / f"{name}.png", days)
    if as_json:
        print(json.dumps({k: v for k, v in result.items() if k != "cells"}, indent=1))
        return 0
    for r in rows:
        print(f"seed {r['seed']:>3} T {r['t']} first gap {r['first_gap']:>2} {r['policy']:<6} "
              f"window mean {r['window_mean']:>6.2f} prediction {r['prediction']:>6.2f} "
              f"[{r['interval_lo']:>6.2f}, {r['interval_hi']:>6.2f}]"
              f"{'' if r['inside'] else '  OUTSIDE'}")
    s = result["summary"]
    print(f"{s['inside']}/{s['cells']} windows inside the 90% interval ({100 * s['hit_rate']:.0f}%), mean absolute "
          f"error {s['mean_absolute_error']}, mean bias {s['mean_bias']:+}")
    for key in ("per_seed", "per_policy"):
        for name, ps in result[key].items():
            print(f"  {name}: {ps['inside']}/{ps['cells']}, MAE {ps['mean_absolute_error']}, bias {ps['mean_bias']:+}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
