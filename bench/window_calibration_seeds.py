"""How far the window calibration's three seeds stand from the predictor's calibration over many seeds (issue 34).

    python bench/window_calibration_seeds.py ROWS.csv [ROWS.csv ...] [--plot F.png] [--target 0.8]

Reads the per-window rows `bench/decompose_window_bias.py --out` writes (any seeds; a seed given in two files is
refused) and prints, per group of seeds (the calibration's named seeds, the others, all) and policy, the windows
whose measured mean falls inside the predicted 90% interval and the mean error P - E, then the share of all
three-seed draws from the given seeds whose windows reach `--target` inside: what the issue's test of three named
seeds would give for a predictor calibrated as this one is over the given seeds. `--plot`: each seed's share inside
per policy, the named seeds marked. Reads figures only; simulates nothing.
"""

from __future__ import annotations

import argparse
import csv
import itertools
import sys
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from calibrate_predictor import DEFAULT_SEEDS, markdown_table

POLICIES = ("tiered", "off")


def read_rows(paths: Sequence[Path]) -> list[dict[str, Any]]:
    """The windows of every file (seed, first gap, policy, predicted, interval, moved M, measured); a seed in two
    files is refused (its windows would count twice)."""
    rows: list[dict[str, Any]] = []
    owner: dict[int, Path] = {}
    for path in paths:
        with path.open(newline="") as fh:
            for r in csv.DictReader(fh):
                seed = int(r["seed"])
                if owner.setdefault(seed, path) != path:
                    raise SystemExit(f"{path}: seed {seed} is also in {owner[seed]}; give each seed once")
                rows.append({"seed": seed, "first_gap": int(r["first_gap"]), "policy": r["policy"],
                             "predicted": float(r["predicted"]),
                             "lo": float(r["interval_lo"]), "hi": float(r["interval_hi"]),
                             "moved": float(r["moved"]), "measured": float(r["measured"])})
    return rows


def inside(row: dict[str, Any]) -> bool:
    return bool(row["lo"] <= row["measured"] <= row["hi"])


def coverage(rows: Iterable[dict[str, Any]]) -> tuple[int, int]:
    """(windows inside, windows)."""
    cells = list(rows)
    return sum(inside(r) for r in cells), len(cells)


def groups(rows: list[dict[str, Any]], named: Sequence[int] = DEFAULT_SEEDS) -> list[dict[str, Any]]:
    """Per group of seeds and policy: seeds, windows, inside, share inside, mean P - E, seeds whose mean P - E < 0."""
    seeds = sorted({r["seed"] for r in rows})
    parts = [("named", [s for s in seeds if s in named]), ("others", [s for s in seeds if s not in named]),
             ("all", seeds)]
    out = []
    for name, members in parts:
        if not members:
            continue
        for policy in (*POLICIES, "both"):
            cells = [r for r in rows if r["seed"] in members and policy in (r["policy"], "both")]
            if not cells:
                continue
            hit, n = coverage(cells)
            per_seed = [[r["predicted"] - r["measured"] for r in cells if r["seed"] == s] for s in members]
            out.append({"seeds": name, "n_seeds": len(members), "policy": policy, "windows": n, "inside": hit,
                        "share": round(hit / n, 3), "mean_error": round(sum(map(sum, per_seed)) / n, 2),
                        "seeds_under": sum(sum(e) < 0 for e in per_seed if e)})
    return out


def draw_shares(rows: list[dict[str, Any]], k: int = 3) -> list[float]:
    """The share inside of every draw of k distinct seeds, every policy's windows together."""
    by_seed = {s: coverage(r for r in rows if r["seed"] == s) for s in sorted({r["seed"] for r in rows})}
    return [sum(by_seed[s][0] for s in draw) / sum(by_seed[s][1] for s in draw)
            for draw in itertools.combinations(sorted(by_seed), k)]


def draws_reaching(rows: list[dict[str, Any]], target: float, k: int = 3) -> tuple[int, int]:
    """(draws of k distinct seeds whose windows, every policy together, reach `target` inside; all such draws)."""
    shares = draw_shares(rows, k)
    return sum(share >= target - 1e-12 for share in shares), len(shares)


def plot(rows: list[dict[str, Any]], path: Path, target: float, named: Sequence[int] = DEFAULT_SEEDS) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    seeds = sorted({r["seed"] for r in rows})
    fig, ax = plt.subplots(figsize=(10, 4.6))
    for offset, policy, color in ((-0.15, "tiered", "tab:blue"), (0.15, "off", "tab:orange")):
        xs, ys = [], []
        for i, s in enumerate(seeds):
            hit, n = coverage(r for r in rows if r["seed"] == s and r["policy"] == policy)
            if n:
                xs.append(i + offset)
                ys.append(hit / n)
        ax.bar(xs, ys, width=0.3, color=color, label=policy)
    ax.axhline(0.9, color="grey", linestyle=":", label="nominal 90%")
    ax.axhline(target, color="tab:red", linestyle="--", label=f"issue's target {target:.0%}")
    ax.set_xticks(range(len(seeds)))
    ax.set_xticklabels([f"{s}*" if s in named else str(s) for s in seeds])
    for label, s in zip(ax.get_xticklabels(), seeds, strict=True):
        if s in named:
            label.set_fontweight("bold")
    ax.set_xlabel("seed (* the calibration's named seeds)")
    ax.set_ylabel("windows inside the 90% interval")
    ax.set_ylim(0, 1.05)
    hit, n = coverage(rows)
    reached, total = draws_reaching(rows, target)
    per_cell = n // len({(r["seed"], r["policy"]) for r in rows})
    ax.set_title(f"Window predictor over {len(seeds)} seeds ({per_cell} windows per seed and policy): "
                 f"{hit}/{n} inside; {reached}/{total} three-seed draws reach {target:.0%}", fontsize=10)
    fig.legend(*ax.get_legend_handles_labels(), fontsize=8, ncol=4, loc="lower center", frameon=False)
    ax.grid(axis="y", alpha=0.3)
    fig.tight_layout(rect=(0, 0.06, 1, 1))
    fig.savefig(path, dpi=110)
    plt.close(fig)


def rows_parser(doc: str, plot_help: str) -> argparse.ArgumentParser:
    """The arguments of a script reading the decomposition's rows: the CSVs, `--plot` and `--target`."""
    ap = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    ap.add_argument("rows", nargs="+", type=Path, help="CSVs of bench/decompose_window_bias.py --out")
    ap.add_argument("--plot", type=Path, help=plot_help)
    ap.add_argument("--target", type=float, default=0.8, help="the issue's share of windows inside (0.8)")
    return ap


def main(argv: list[str] | None = None) -> int:
    args = rows_parser(__doc__, "write each seed's share inside to this PNG").parse_args(argv)
    rows = read_rows(args.rows)
    cols = ["seeds", "n_seeds", "policy", "windows", "inside", "share", "mean_error", "seeds_under"]
    print(markdown_table(groups(rows), cols))
    for name, subset in (("all seeds", rows), ("other seeds", [r for r in rows if r["seed"] not in DEFAULT_SEEDS])):
        reached, total = draws_reaching(subset, args.target)
        if total:
            print(f"three-seed draws from the {name} reaching {args.target:.0%} inside: {reached} of {total} "
                  f"({reached / total:.0%})")
    named = [r for r in rows if r["seed"] in DEFAULT_SEEDS]
    if named and len({r["seed"] for r in named}) == len(DEFAULT_SEEDS):
        hit, n = coverage(named)
        shares = draw_shares(rows)
        print(f"three-seed draws from all seeds at or below the named seeds' {hit}/{n} ({hit / n:.0%}): "
              f"{sum(share <= hit / n + 1e-12 for share in shares)} of {len(shares)}")
    if args.plot:
        plot(rows, args.plot, args.target)
    return 0


if __name__ == "__main__":
    sys.exit(main())
