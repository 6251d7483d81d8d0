"""Where the window predictor's error comes from (issue 34, the window calibration's misses).

    python bench/decompose_window_bias.py [--seeds 42,7,11] [--gaps 1-35] [--policies tiered,off] [--out F.csv]
                                          [--resample-history]

The predicted window mean P (`evaluation/exposure.py`: per-task answer-change rates measured before T') and the
measured one E differ by P - E = (P - M) + (M - E), where M is the window mean of the tasks whose answer *did*
move on some day their served data missed: the same change measurement the rates come from
(`AnswerChangeRates.measure`), but taken over the window's own days (to T) instead of before T'.

- P - M, the **rate shift**: the answers moved more (M > P) or less (M < P) often during the window than on the
  days before T'. A predictor that knows only the past cannot see it.
- M - E, the **non-additivity**: a task whose answer moved on a missed day but whose stale answer equals the one
  at T anyway (a change and a change back, or changes of two classes that cancel, or a day's move of a windowed
  question that leaves the window by T). The predictor counts any move as exposure, so this is its model error.
  It is the difference of two counts, each a column: `moved_not_exposed` (moved on a missed day, not exposed at T)
  and `exposed_not_moved` (exposed at T with no measured move: a move that shows only when two classes are rolled
  back together, which the per-class measurement cannot see).

M is an oracle (it reads the window's changes); it is computed here to explain the calibration, never to predict.
Nothing is fitted. Same windows as `python bench/calibrate_predictor.py --window 28` (the default world of each
seed, T = 2024-04-27, the task set sampled at T re-anchored to each day; window g's days at gaps g .. g + 27).

`--resample-history` adds a second interval (`history_lo`/`history_hi`): each bootstrap sample first resamples
the measured days before T' and then draws the window's days from that resample, so the interval carries the
uncertainty of rates measured on a finite past as well; `history_inside` counts the windows it holds.
"""

from __future__ import annotations

import argparse
import datetime as dt
import sys
import time
from pathlib import Path
from typing import Any

# The calibration's windows, seeds and day, from its script (bench/ is not a package).
sys.path.insert(0, str(Path(__file__).resolve().parent))
from calibrate_predictor import DEFAULT_SEEDS, T, default_world_tasks, markdown_table, parse_gaps, write_csv

DAYS = 28


def moved_tasks(oracle: Any, day: Any) -> set[str]:
    """Tasks of one window day (not degenerate) whose answer moved, by the measured changes, on a missed day."""
    skip = {t.task_id for t in day.run.tasks if t.degenerate}
    vintage = day.run.vintage
    moved = set()
    for task in day.tasks:
        if task.task_id in skip:
            continue
        for c, (near, far) in oracle.missed_days(task, vintage, day.anchor).items():
            missed = {day.anchor - dt.timedelta(days=o) for o in range(near, far + 1)}
            if missed & set(oracle.changed.get((task.task_id, c), ())):
                moved.add(task.task_id)
                break
    return moved


def day_counts(oracle: Any, day: Any) -> tuple[int, int, int]:
    """One window day's tasks that moved on a missed day, and the two ways M and E part: moved but not exposed at T
    (for example a change and a change back), and exposed at T without any measured move (for example a move that
    shows only when two classes are rolled back together: an offboarding removes a user's spend through the user
    leaving and through their licenses' unassignment on the same day, so rolling back either class alone moves
    nothing)."""
    moved = moved_tasks(oracle, day)
    exposed = {t.task_id for t in day.run.tasks if t.exposed}
    return len(moved), len(moved - exposed), len(exposed - moved)


def decompose(seeds: list[int], gaps: list[int], policies: list[str], echo: Any = print,
              resample_history: bool = False) -> list[dict[str, Any]]:
    from churn_assets.evaluation.exposure import AnswerChangeRates, change_rates
    from churn_assets.evaluation.window import Window, policy_windows, window_prediction
    from churn_assets.grounding.registry import load_registry

    registry = load_registry()
    rows: list[dict[str, Any]] = []
    for seed in seeds:
        started = time.perf_counter()
        config, records, start, resolver, tasks = default_world_tasks(seed)
        rates = change_rates(records, tasks, start=start, anchor=T)  # to T - 1, as the calibration
        oracle = AnswerChangeRates.measure(records, tasks, start=start, until=T)  # every day to T itself
        for gap in gaps:
            window = Window(T - dt.timedelta(days=DAYS - 1 + gap), DAYS, T)
            for w in policy_windows(records, tasks, window, policies, registry, start=start,
                                    calendar_days=config.days, resolver=resolver, rates=rates):
                counts = [day_counts(oracle, d) for d in w.days]
                moved, moved_not_exposed, exposed_not_moved = (sum(c[i] for c in counts) / len(counts)
                                                               for i in range(3))
                lo, hi = w.prediction_interval_90 or (0.0, 0.0)
                row = {"seed": seed, "first_gap": gap, "t_prime": window.t_prime.isoformat(),
                       "policy": w.policy_id, "predicted": round(w.prediction or 0.0, 2),
                       "interval_lo": round(lo, 2), "interval_hi": round(hi, 2),
                       "moved": round(moved, 2), "measured": round(w.exposure.mean, 2),
                       "moved_not_exposed": round(moved_not_exposed, 2),
                       "exposed_not_moved": round(exposed_not_moved, 2)}
                if resample_history:
                    _, wide = window_prediction(w.days, rates, window.t_prime, resample_history=True)
                    row["history_lo"], row["history_hi"] = (round(x, 2) for x in wide or (0.0, 0.0))
                rows.append(row)
        echo(f"seed {seed}: {len(gaps) * len(policies)} windows in {time.perf_counter() - started:.0f} s",
             file=sys.stderr)
    return rows


def summarize(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out = []
    for key in sorted({(r["seed"], r["policy"]) for r in rows}):
        cells = [r for r in rows if (r["seed"], r["policy"]) == key]
        n = len(cells)

        def mean(f: Any, cells: list[dict[str, Any]] = cells, n: int = n) -> float:
            return round(sum(f(r) for r in cells) / n, 2)

        out.append({"seed": key[0], "policy": key[1], "windows": n,
                    "inside": sum(r["interval_lo"] <= r["measured"] <= r["interval_hi"] for r in cells),
                    "moved_inside": sum(r["interval_lo"] <= r["moved"] <= r["interval_hi"] for r in cells),
                    "predicted": mean(lambda r: r["predicted"]), "moved": mean(lambda r: r["moved"]),
                    "measured": mean(lambda r: r["measured"]),
                    "rate_shift": mean(lambda r: r["predicted"] - r["moved"]),
                    "non_additivity": mean(lambda r: r["moved"] - r["measured"]),
                    "mean_abs_rate_shift": mean(lambda r: abs(r["predicted"] - r["moved"])),
                    "mean_abs_non_additivity": mean(lambda r: abs(r["moved"] - r["measured"])),
                    # M - E = moved_not_exposed - exposed_not_moved, window by window
                    "moved_not_exposed": mean(lambda r: r["moved_not_exposed"]) if "moved_not_exposed" in cells[0]
                    else "",
                    "exposed_not_moved": mean(lambda r: r["exposed_not_moved"]) if "exposed_not_moved" in cells[0]
                    else "",
                    "history_inside": sum(r["history_lo"] <= r["measured"] <= r["history_hi"] for r in cells)
                    if "history_lo" in cells[0] else ""})
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seeds", default=",".join(map(str, DEFAULT_SEEDS)))
    ap.add_argument("--gaps", default="1-35", help="first gaps of the windows, e.g. 1-35 or 2,10,20")
    ap.add_argument("--policies", default="tiered,off")
    ap.add_argument("--out", type=Path, help="write every window's row to this CSV")
    ap.add_argument("--resample-history", action="store_true",
                    help="also the interval that resamples the measured history first (history_lo/hi, "
                         "history_inside): the uncertainty of the past rates added to the window's")
    args = ap.parse_args(argv)
    rows = decompose([int(s) for s in args.seeds.split(",")], parse_gaps(args.gaps), args.policies.split(","),
                     echo=print, resample_history=args.resample_history)
    if args.out:
        write_csv(args.out, rows)
    cols = ["seed", "policy", "windows", "inside", "moved_inside", "predicted", "moved", "measured", "rate_shift",
            "non_additivity", "mean_abs_rate_shift", "mean_abs_non_additivity", "moved_not_exposed",
            "exposed_not_moved"] + \
        (["history_inside"] if args.resample_history else [])
    print(markdown_table(summarize(rows), cols))
    return 0


if __name__ == "__main__":
    sys.exit(main())
