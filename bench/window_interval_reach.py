"""What an honest 90% interval could hold on the window calibration's named seeds (issue 34).

    python bench/window_interval_reach.py ROWS.csv [ROWS.csv ...] --pooled POOLED.csv [--plot F.png]

The window calibration asks that the measured window mean fall inside the predicted 90% interval in 80% of the
named seeds' windows (42, 7, 11); it holds 61%. This asks whether any honest interval could reach that, from figures
already measured (it simulates nothing). For three centres and a scale k applied to both half-widths of the published
interval about the centre (k = 1: the published width), it counts the windows inside on the named seeds and on the
other seeds:

  * `published`: the product's centre P and interval; the measured mean E inside.
  * `pooled`: the centre moved by the pooled experiment's shift (`bench/pooled_rates_experiment.py`), E inside the
    interval moved by the same shift (the approximation that experiment states).
  * `pooled_no_model_error`: pooled rates and a model that knew which moves are undone by T and which moves no class
    makes alone, an oracle: its centre is the pooled centre less the window's own non-additivity M - E, so E is inside
    exactly when M (`moved`, the window mean of tasks whose answer moved on a missed day) is inside the moved interval.
    An idealised version of the three fixes of docs/tasks.md: its only error is the rate shift left after pooling. It
    is the most accurate centre, not a bound on what a real predictor with its own errors and interval would hold.

For each centre and policy it prints the smallest k (0.01 steps) at which the other seeds' windows reach 90% inside
(an interval honest by construction on the other seeds) and what that k holds on the named seeds, the test; then, per
centre, the smallest k (one for both policies) at which the named seeds reach the target, and what that k holds on
the other seeds (the level such an interval really has). Scaling keeps the bootstrap interval's shape; a re-derived
interval of another model could differ in shape, so the figures are a what-if of width, not a new predictor's
calibration.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from calibrate_predictor import DEFAULT_SEEDS, inside, markdown_table
from pooled_rates_experiment import read_rows as read_pooled_rows
from window_calibration_seeds import POLICIES, read_rows, rows_parser

CENTRES = ("published", "pooled", "pooled_no_model_error")
NOMINAL = 0.9
STEP = 0.01
MAX_SCALE = 4.0


def read_pooled(path: Path) -> dict[tuple[int, int, str], float]:
    """(seed, first gap, policy) -> the pooled centre's shift (pooled - plug-in); a window given twice is refused."""
    out: dict[tuple[int, int, str], float] = {}
    for r in read_pooled_rows([path]):
        key = (r["seed"], r["first_gap"], r["policy"])
        if key in out:
            raise SystemExit(f"{path}: the window {key} is given twice")
        out[key] = r["pooled"] - r["plug_in"]
    return out


def cells(rows: Sequence[dict[str, Any]], shifts: dict[tuple[int, int, str], float],
          centre: str) -> list[dict[str, Any]]:
    """Each window as (seed, centre, lower and upper half-widths, the value that must fall inside) for `centre`."""
    out = []
    for r in rows:
        key = (r["seed"], r["first_gap"], r["policy"])
        shift = 0.0 if centre == "published" else shifts[key]
        value = r["moved"] if centre == "pooled_no_model_error" else r["measured"]
        out.append({"seed": r["seed"], "policy": r["policy"], "centre": r["predicted"] + shift,
                    "below": r["predicted"] - r["lo"], "above": r["hi"] - r["predicted"], "value": value})
    return out


def held(windows: Iterable[dict[str, Any]], scale: float) -> tuple[int, int]:
    """(windows inside the interval with both half-widths times `scale`, windows)."""
    ws = list(windows)
    hit = sum(inside(w["value"], w["centre"] - scale * w["below"], w["centre"] + scale * w["above"]) for w in ws)
    return hit, len(ws)


def smallest_scale(windows: Sequence[dict[str, Any]], share: float) -> float | None:
    """The smallest scale (in steps of STEP, up to MAX_SCALE) whose interval holds `share` of `windows`."""
    for i in range(round(MAX_SCALE / STEP) + 1):
        scale = round(i * STEP, 2)
        hit, n = held(windows, scale)
        if n and hit >= share * n - 1e-9:
            return scale
    return None


def mean_width(windows: Sequence[dict[str, Any]], scale: float) -> float:
    return sum(scale * (w["below"] + w["above"]) for w in windows) / len(windows)


def reach(rows: Sequence[dict[str, Any]], shifts: dict[tuple[int, int, str], float],
          named: Sequence[int] = DEFAULT_SEEDS) -> list[dict[str, Any]]:
    """Per centre and policy: the named and other seeds' windows inside at the published width, the scale whose
    interval holds 90% of the other seeds' windows of the policy (chosen without the named seeds), the mean width it
    gives there and the named seeds' windows it holds; a row per centre sums both policies."""
    out = []
    for centre in CENTRES:
        ws = cells(rows, shifts, centre)
        total, complete = [0, 0], True
        for policy in POLICIES:
            mine = [w for w in ws if w["seed"] in named and w["policy"] == policy]
            others = [w for w in ws if w["seed"] not in named and w["policy"] == policy]
            if not mine or not others:
                complete = False
                continue
            scale = smallest_scale(others, NOMINAL)
            (m1, n1), (o1, p1) = held(mine, 1.0), held(others, 1.0)
            row = {"centre": centre, "policy": policy, "named at x1": f"{m1}/{n1}", "others at x1": f"{o1}/{p1}",
                   "scale for 90% of others": "none" if scale is None else f"x{scale:.2f}"}
            if scale is not None:
                hit, n = held(mine, scale)
                total = [total[0] + hit, total[1] + n]
                row |= {"mean width there": round(mean_width(others, scale), 1), "named there": f"{hit}/{n}"}
            else:
                complete = False
            out.append(row)
        if total[1] and complete:  # a sum over one policy only would read as both
            out.append({"centre": centre, "policy": "both", "named there": f"{total[0]}/{total[1]} "
                        f"({total[0] / total[1]:.0%})"})
    return out


def one_scale_for(rows: Sequence[dict[str, Any]], shifts: dict[tuple[int, int, str], float], centre: str, target: float,
                  named: Sequence[int] = DEFAULT_SEEDS) -> tuple[float, tuple[int, int]] | None:
    """The smallest scale, one for both policies, at which the named seeds' windows reach `target`, and the other
    seeds' windows it holds (the level such an interval really has)."""
    ws = cells(rows, shifts, centre)
    scale = smallest_scale([w for w in ws if w["seed"] in named], target)
    return None if scale is None else (scale, held([w for w in ws if w["seed"] not in named], scale))


def plot(rows: Sequence[dict[str, Any]], shifts: dict[tuple[int, int, str], float], path: Path, target: float,
         named: Sequence[int] = DEFAULT_SEEDS) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    scales = [round(i * 0.05, 2) for i in range(10, 61)]
    fig, axes = plt.subplots(len(POLICIES), len(CENTRES), figsize=(13, 7), sharey=True, sharex=True)
    for col, centre in enumerate(CENTRES):
        ws = cells(rows, shifts, centre)
        for line, policy in enumerate(POLICIES):
            ax = axes[line][col]
            mine = [w for w in ws if w["seed"] in named and w["policy"] == policy]
            others = [w for w in ws if w["seed"] not in named and w["policy"] == policy]
            if not mine or not others:
                ax.set_visible(False)
                continue
            for group, members, style in (("named", mine, "-"), ("other", others, "--")):
                ax.plot(scales, [held(members, s)[0] / len(members) for s in scales], style, color="black",
                        label=f"{group} seeds")
            honest = smallest_scale(others, NOMINAL)
            if honest is not None:  # the width honest on the other seeds, and what it holds on the named ones
                hit, n = held(mine, honest)
                ax.plot([honest], [hit / n], "o", color="tab:green",
                        label="named seeds at the width holding 90% of the others")
                ax.annotate(f"x{honest:.2f}: {hit}/{n}", (honest, hit / n), textcoords="offset points",
                            xytext=(8, -18), fontsize=8, color="tab:green",
                            bbox={"facecolor": "white", "edgecolor": "none", "alpha": 0.85, "pad": 1})
            ax.axhline(NOMINAL, color="grey", linestyle=":", label="nominal 90%")
            ax.axhline(target, color="tab:red", linestyle="--", label=f"issue's target {target:.0%}")
            ax.axvline(1.0, color="tab:blue", alpha=0.4, label="published width")
            ax.set_title(f"{centre.replace('_', ' ')}, {policy}", fontsize=10)
            ax.grid(alpha=0.3)
            if line == len(POLICIES) - 1:
                ax.set_xlabel("interval half-widths x k")
        axes[0][0].set_ylim(0, 1.02)
    for line in range(len(POLICIES)):
        axes[line][0].set_ylabel("windows inside")
    fig.legend(*axes[0][0].get_legend_handles_labels(), fontsize=8, ncol=6, loc="lower center", frameon=False)
    other_seeds = sorted({r["seed"] for r in rows} - set(named))
    fig.suptitle(f"Window predictor: what a wider interval holds on the named seeds ({', '.join(map(str, named))}) "
                 f"and the {len(other_seeds)} others", fontsize=10)
    fig.tight_layout(rect=(0, 0.05, 1, 0.96))
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    ap = rows_parser(__doc__, "write the share inside against the scale to this PNG")
    ap.add_argument("--pooled", type=Path, required=True, help="CSV of bench/pooled_rates_experiment.py --out")
    args = ap.parse_args(argv)
    rows = read_rows(args.rows)
    shifts = read_pooled(args.pooled)
    missing = sorted({(r["seed"], r["first_gap"], r["policy"]) for r in rows} - shifts.keys())
    if missing:
        raise SystemExit(f"{args.pooled}: no pooled centre for {len(missing)} window(s), the first {missing[0]}")
    cols = ["centre", "policy", "named at x1", "others at x1", "scale for 90% of others", "mean width there",
            "named there"]
    print(markdown_table([{c: r.get(c, "") for c in cols} for r in reach(rows, shifts)], cols))
    for centre in CENTRES:
        found = one_scale_for(rows, shifts, centre, args.target)
        if found is None:
            print(f"{centre}: no scale up to x{MAX_SCALE} holds {args.target:.0%} of the named seeds' windows")
            continue
        scale, (hit, n) = found
        print(f"{centre}: the named seeds reach {args.target:.0%} at x{scale:.2f} (one scale for both policies), "
              f"where the other seeds' windows hold {hit}/{n} ({hit / n:.0%})")
    if args.plot:
        plot(rows, shifts, args.plot, args.target)
    return 0


if __name__ == "__main__":
    sys.exit(main())
