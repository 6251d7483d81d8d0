"""The analytic anchor (issue 34, item 4): the simulator's freshness against Cho and Garcia-Molina's formula.

    python bench/analytic_anchor.py [--seed 42] [--days 28] [--t-prime 2024-03-29] [--t 2024-04-27] \
        [--name analytic_anchor] [--out docs/figures/sweeps] [--json]

Cho and Garcia-Molina ("Effective page refresh policies for Web crawlers", ACM TODS 2003): an element that changes
as a Poisson process of rate lambda and is refreshed every I days is fresh a share (1 - e^(-lambda I)) / (lambda I)
of the time; with a fixed number of refreshes, spending them uniformly beats spending them in proportion to the
change rates. On the seed's default world, T' = 2024-03-29 fixed and the question arriving on each of the `--days`
days ending at T = 2024-04-27 (the D+28 window, `evaluation/window.py`; `--t-prime` and `--t` move it: a window
far from T' shows the long run the formula describes), it writes `<name>.csv`, `.json` and `.png` into `--out`:

1. **Per cached class C and policy**, on the tasks that read C and no other cached class (the other tasks in one
   aggregate row): lambda_C, the mean over those tasks of the share of days before T' on which class C's changes
   moved the task's answer (`AnswerChangeRates`, docs/tasks.md: the answer-level rate; the class's change events
   per day are shown beside it); I, the policy's refresh period of C; and five freshness figures, from the
   formula to the simulator: `cho` (the formula with lambda_C), `cho_per_task` (the formula per task, averaged:
   tasks differ in rate), `predicted` (1 - the predictor's probability on the window's actual served days: whole
   days, the window's phase, a question's change window), `unexposed` (the simulator: the share of those tasks not
   exposed, averaged over the window's days) and `unchanged` (gold at T equal to the served gold, degenerate
   differences counted as changes).
2. **Uniform against proportional** with the budget counted in refreshes: `uniform:N` and `proportional:N` for N
   = 4, 8, 16, 32 refreshes per 30 days: the refreshes each makes over (T', T], the window-mean exposure of every
   task (the simulator) and the formula's freshness of the single-class tasks under each allocation. Rows copied
   are the `budget` sweep's second axis (docs/sweeps.md): they need the built warehouse, this script the ledger only.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

# The formula, one definition shared with tests/test_analytic_anchor.py.
from churn_assets.freshness.analytic import cho_freshness

# The default world of a seed, simulated as the calibration does (bench/ is not a package).
sys.path.insert(0, str(Path(__file__).resolve().parent))
from calibrate_predictor import default_world, write_csv

T = dt.date(2024, 4, 27)
T_PRIME = dt.date(2024, 3, 29)
BUDGETS = (4, 8, 16, 32)
POLICIES = ("tiered", "off", *(f"{a}:{n}" for n in BUDGETS for a in ("uniform", "proportional")))
OTHER = "(other tasks)"


def single_cached_class(template_classes: tuple[str, ...], cached: set[str]) -> str:
    """The one cached class a task reads, or `OTHER` (none, or several)."""
    read = sorted(set(template_classes) & cached)
    return read[0] if len(read) == 1 else OTHER


def anchor(seed: int, days: int, t_prime: dt.date = T_PRIME, t: dt.date = T, echo: Any = print) -> dict[str, Any]:
    from churn_assets.evaluation.exposure import change_rates
    from churn_assets.evaluation.window import Window, paired_difference, policy_windows
    from churn_assets.freshness.planning import measured_change_rates
    from churn_assets.freshness.policies import parse_policy
    from churn_assets.grounding.registry import load_registry
    from churn_assets.tasks.generator import generate_task_set
    from churn_assets.tasks.templates import template

    started = time.perf_counter()
    registry = load_registry()
    config, records, start, resolver = default_world(seed)
    tasks = generate_task_set(records, world_id=config.world_id, anchor=t, resolver=resolver).tasks
    rates = change_rates(records, tasks, start=start, anchor=t)
    class_rates = measured_change_rates(records, start, t_prime, list(registry.classes))
    cached = {c.name for c in registry.staged_classes}
    group = {t.task_id: single_cached_class(template(t.template_id).classes, cached) for t in tasks}
    members: dict[str, list[str]] = {}
    for task_id, c in group.items():
        members.setdefault(c, []).append(task_id)
    lam_task = {task_id: rates.rate(task_id, c, t_prime) for task_id, c in group.items() if c != OTHER}
    lam = {c: statistics.fmean(lam_task[q] for q in ids) for c, ids in members.items() if c != OTHER}
    window = Window(t_prime, days, t)
    found = policy_windows(records, tasks, window, POLICIES, registry, start=start, calendar_days=config.days,
                           resolver=resolver, rates=rates)
    rows: list[dict[str, Any]] = []
    budget_rows: list[dict[str, Any]] = []
    for w in found:
        policy = parse_policy(w.policy)
        periods = policy.periods(registry, class_rates, config.days)
        for c in sorted(members, key=lambda name: (name == OTHER, name)):
            ids = set(members[c])
            share: dict[str, list[float]] = {"unexposed": [], "unchanged": [], "predicted": [], "degenerate": []}
            for d in w.days:
                mine = [x for x in d.run.tasks if x.task_id in ids]
                if not mine:
                    continue
                share["unexposed"].append(1 - sum(x.exposed for x in mine) / len(mine))
                share["unchanged"].append(1 - sum(x.differs for x in mine) / len(mine))
                share["predicted"].append(1 - sum(x.probability for x in mine) / len(mine))
                share["degenerate"].append(sum(x.degenerate_exposed for x in mine) / len(mine))
            period = None if c == OTHER else periods[c]
            row = {"class": c, "policy": w.policy, "tasks": len(ids),
                   "lambda_answer": None if c == OTHER else round(lam[c], 4),
                   "lambda_events": None if c == OTHER else round(class_rates[c], 3),
                   "period_days": None if period is None else round(period, 2),
                   "cho": None if c == OTHER else round(cho_freshness(lam[c], period), 4),
                   "cho_per_task": None if c == OTHER else round(statistics.fmean(
                       cho_freshness(lam_task[q], period) for q in ids), 4),
                   **{k: round(statistics.fmean(v), 4) for k, v in share.items()}}
            rows.append(row)
        if w.policy.partition(":")[0] in ("uniform", "proportional"):
            singles = [r for r in rows if r["policy"] == w.policy and r["class"] != OTHER]
            weight = sum(r["tasks"] for r in singles)
            budget_rows.append({
                "allocation": w.policy.partition(":")[0], "budget": int(w.policy.partition(":")[2]),
                "refreshes": sum(len([x for x in ds if x > t_prime]) for ds in
                                 policy.refresh_days(registry, t_prime, t, class_rates, config.days).values()),
                "exposure_mean": round(w.exposure.mean, 2),
                "exposure_lo": round(w.exposure.interval_90[0], 2), "exposure_hi": round(w.exposure.interval_90[1], 2),
                "prediction_mean": round(w.prediction or 0.0, 2),
                "single_class_unexposed": round(sum(r["unexposed"] * r["tasks"] for r in singles) / weight, 4),
                "single_class_cho": round(sum((r["cho"] or 0.0) * r["tasks"] for r in singles) / weight, 4),
                "periods": {c: None if p is None else round(p, 2) for c, p in periods.items()}})
    by_policy = {w.policy: w for w in found}
    for r in budget_rows:  # uniform minus proportional, paired by day and task
        if r["allocation"] == "uniform":
            d = paired_difference(by_policy[f"uniform:{r['budget']}"].days,
                                  by_policy[f"proportional:{r['budget']}"].days)
            r["uniform_minus_proportional"] = round(d.mean, 2)
            r["difference_interval_90"] = [round(x, 2) for x in d.interval_90]
    echo(f"seed {seed}: {len(found)} policies over {days} days in {time.perf_counter() - started:.0f} s")
    return {"seed": seed, "world": config.world_id, "t_prime": t_prime.isoformat(), "first": window.first.isoformat(),
            "t": t.isoformat(), "days": days, "lambda_definition": "mean answer-change rate (per day, before T') of "
            "the tasks that read only class C among the cached classes", "class_rows": rows,
            "budget_rows": sorted(budget_rows, key=lambda r: (r["budget"], r["allocation"]))}


def plot(result: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [r for r in result["class_rows"] if r["class"] != OTHER and r["policy"] != "off"]
    fig, axes = plt.subplots(1, 2, figsize=(15, 6.2))
    ax = axes[0]
    classes = sorted({r["class"] for r in rows})
    markers = {"tiered": "*", "uniform": "o", "proportional": "s"}
    colors = dict(zip(classes, ("tab:blue", "tab:red", "tab:green", "tab:purple", "tab:orange", "tab:brown"),
                      strict=False))
    for r in rows:
        family = r["policy"].partition(":")[0]
        ax.scatter(r["cho"], r["unexposed"], color=colors[r["class"]], marker=markers[family],
                   s=90 if family == "tiered" else 30, alpha=0.85)
        ax.scatter(r["cho"], r["predicted"], color=colors[r["class"]], marker=markers[family],
                   s=90 if family == "tiered" else 30, facecolors="none", alpha=0.6)
    ax.plot([0, 1], [0, 1], color="gray", lw=1, ls="--")
    for c in classes:
        lam = next(r["lambda_answer"] for r in rows if r["class"] == c)
        ax.scatter([], [], color=colors[c], label=f"{c} (lambda {lam}/day)")
    for family, m in markers.items():
        ax.scatter([], [], color="gray", marker=m, label=family)
    ax.scatter([], [], color="gray", facecolors="none", label="hollow: the predictor on the actual days")
    ax.set_xlabel("Cho-Garcia-Molina freshness (1 - e^(-lambda I)) / (lambda I)")
    ax.set_ylabel(f"share of the class's tasks not exposed (mean over {result['days']} days)")
    ax.set_xlim(0, 1.02)
    ax.set_ylim(0, 1.02)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="lower right")
    ax.set_title("Per class and policy: tasks reading one cached class", fontsize=10)
    ax = axes[1]
    twin = ax.twinx()
    for allocation, color in (("uniform", "tab:blue"), ("proportional", "tab:red")):
        g = sorted((r for r in result["budget_rows"] if r["allocation"] == allocation), key=lambda r: r["refreshes"])
        ax.errorbar([r["refreshes"] for r in g], [r["exposure_mean"] for r in g],
                    yerr=[[r["exposure_mean"] - r["exposure_lo"] for r in g],
                          [r["exposure_hi"] - r["exposure_mean"] for r in g]],
                    color=color, marker="o", capsize=3, label=f"{allocation}: exposed tasks (window mean, 90%)")
        for r in g:
            ax.annotate(str(r["budget"]), (r["refreshes"], r["exposure_mean"]), textcoords="offset points",
                        xytext=(5, 4), fontsize=7)
        twin.plot([r["refreshes"] for r in g], [r["single_class_cho"] for r in g], color=color, ls="--",
                  label=f"{allocation}: formula's freshness of single-class tasks")
    twin.set_ylabel("formula's freshness (dashed)")
    twin.set_ylim(0, 1)
    ax.set_xlabel("refreshes made over (T', T] (labels: budget N per 30 days)")
    ax.set_ylabel("exposed tasks, mean over the window")
    ax.grid(alpha=0.3)
    handles = ax.get_legend_handles_labels()[0] + twin.get_legend_handles_labels()[0]
    labels = ax.get_legend_handles_labels()[1] + twin.get_legend_handles_labels()[1]
    ax.legend(handles, labels, fontsize=7, loc="upper right")
    ax.set_title("Uniform against proportional, the budget counted in refreshes", fontsize=10)
    fig.suptitle(f"The analytic anchor: {result['world']}, T' = {result['t_prime']}, T over {result['first']} .. "
                 f"{result['t']}", fontsize=11)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--days", type=int, default=28)
    parser.add_argument("--out", type=Path, default=Path("docs/figures/sweeps"))
    parser.add_argument("--t-prime", type=dt.date.fromisoformat, default=T_PRIME)
    parser.add_argument("--t", type=dt.date.fromisoformat, default=T)
    parser.add_argument("--name", default="analytic_anchor", help="the output files' name")
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    args = parser.parse_args(argv)
    result = anchor(args.seed, args.days, args.t_prime, args.t, echo=lambda m: print(m, file=sys.stderr, flush=True))
    args.out.mkdir(parents=True, exist_ok=True)
    write_csv(args.out / f"{args.name}.csv", result["class_rows"])  # the file tests/test_analytic_anchor.py pins
    (args.out / f"{args.name}.json").write_text(json.dumps(result, indent=1) + "\n")
    plot(result, args.out / f"{args.name}.png")
    if args.json:
        print(json.dumps(result, indent=1))
        return 0
    print(f"{'class':24}{'policy':16}{'tasks':>6}{'lambda':>8}{'events':>8}{'I':>7}{'cho':>7}{'task':>7}"
          f"{'pred':>7}{'unexp':>7}{'unch':>7}")
    def f(v: Any, w: int = 7, p: int = 3) -> str:
        return f"{'-':>{w}}" if v is None else f"{v:>{w}.{p}f}"

    for r in result["class_rows"]:
        print(f"{r['class']:24}{r['policy']:16}{r['tasks']:>6}{f(r['lambda_answer'], 8, 4)}"
              f"{f(r['lambda_events'], 8, 2)}{f(r['period_days'], 7, 1)}{f(r['cho'])}{f(r['cho_per_task'])}"
              f"{f(r['predicted'])}{f(r['unexposed'])}{f(r['unchanged'])}")
    print(f"\n{'budget':>7}{'allocation':>14}{'refreshes':>10}{'exposure (window mean, 90%)':>32}{'formula':>9}"
          "   uniform - proportional (paired, 90%)")
    for r in result["budget_rows"]:
        paired = f"   {r['uniform_minus_proportional']:+.1f} {r['difference_interval_90']}" \
            if "uniform_minus_proportional" in r else ""
        print(f"{r['budget']:>7}{r['allocation']:>14}{r['refreshes']:>10}"
              f"{r['exposure_mean']:>12.1f} [{r['exposure_lo']:.1f}-{r['exposure_hi']:.1f}]{'':>8}"
              f"{r['single_class_cho']:>9.3f}{paired}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
