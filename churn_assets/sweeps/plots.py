"""The sweep report's plots (matplotlib, Agg): each a function from analysis tables to a PNG file, titled,
labelled with units and a legend, readable without the report around it. A plot whose data the sweep does not
have is not drawn (the function returns None)."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from churn_assets.evaluation.verdicts import VERDICTS

DPI = 100
VERDICT_COLORS = {"correct": "tab:green", "freshness_error": "tab:orange", "mixed_vintage_error": "tab:red",
                  "unattributed_error": "tab:olive", "reasoning_error": "tab:purple", "parse_failure": "tab:gray",
                  "transport_failure": "black"}


def _plt() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _save(fig: Any, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(path, dpi=DPI)
    _plt().close(fig)
    return path


def _side(policy: str) -> str:
    return "off" if policy == "off" else policy


def stale_vs_gap(cells: Sequence[Mapping[str, Any]], path: Path, title: str) -> Path | None:
    """Stale answers (evaluated) against the gap, per policy, with exposure and the prediction's 90% band."""
    series: dict[str, list[Mapping[str, Any]]] = defaultdict(list)
    for c in cells:
        if c["kind"] == "evaluated" and c["status"] == "done":
            series[f"{c['arm']} ({_side(c['policy'])})"].append(c)
    if not series or max(len(v) for v in series.values()) < 2:
        return None
    plt = _plt()
    fig, ax = plt.subplots(figsize=(10, 5.5))
    for (name, rows), color in zip(sorted(series.items()), ("tab:blue", "tab:red", "tab:green", "tab:purple"),
                                   strict=False):
        rows = sorted(rows, key=lambda r: r["gap"])
        gaps = [r["gap"] for r in rows]
        ax.fill_between(gaps, [r["prediction_lo"] for r in rows], [r["prediction_hi"] for r in rows], color=color,
                        alpha=0.12, label=f"{name}: predicted 90% interval")
        ax.plot(gaps, [r["prediction"] for r in rows], color=color, lw=1, ls="--", label=f"{name}: prediction")
        ax.plot(gaps, [r["stale_answers"] for r in rows], color=color, lw=2, marker="o", ms=4,
                label=f"{name}: stale answers")
        ax.scatter(gaps, [r["exposure"] for r in rows], color=color, marker="x", s=30, label=f"{name}: exposure")
    ax.set_xlabel("gap T - T' (days since the cache build)")
    ax.set_ylabel("tasks (of the task set)")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, ncol=2)
    return _save(fig, path)


def served_age(ages: Sequence[Mapping[str, Any]], path: Path, title: str) -> Path | None:
    """Age at T of the data served per cached class against the gap, one panel per policy (the sawtooth)."""
    by_policy: dict[str, dict[str, list[tuple[int, int]]]] = defaultdict(lambda: defaultdict(list))
    for a in ages:
        if a["age_days"] is not None:
            by_policy[f"{a['arm']} ({_side(a['policy'])})"][a["entity_class"]].append((a["gap"], a["age_days"]))
    if not by_policy or max(len({g for g, _ in pts}) for v in by_policy.values() for pts in v.values()) < 2:
        return None
    plt = _plt()
    panels = sorted(by_policy)
    fig, axes = plt.subplots(1, len(panels), figsize=(6 * len(panels), 4.8), squeeze=False, sharey=True)
    for ax, name in zip(axes[0], panels, strict=True):
        for cls, pts in sorted(by_policy[name].items()):
            pts = sorted(set(pts))
            ax.step([g for g, _ in pts], [a for _, a in pts], where="mid", marker=".", label=cls)
        ax.set_title(name, fontsize=10)
        ax.set_xlabel("gap T - T' (days)")
        ax.grid(alpha=0.3)
    axes[0][0].set_ylabel("age at T of the data served (days)")
    axes[0][-1].legend(fontsize=8)
    fig.suptitle(title)
    return _save(fig, path)


def ttl_heatmap(grid: Sequence[Mapping[str, Any]], path: Path, title: str) -> Path | None:
    """Measured exposure (mean over seeds) and prediction, TTL x rate multiplier, one row of panels per gap."""
    if not grid:
        return None
    import numpy as np

    plt = _plt()
    ttls = sorted({r["ttl"] for r in grid})
    mults = sorted({r["rate_multiplier"] for r in grid}, key=float)
    gaps = sorted({r["gap"] for r in grid})
    fig, axes = plt.subplots(len(gaps), 2, figsize=(12, 3.6 * len(gaps)), squeeze=False)
    vmax = max((r["exposure_max"] or 0) for r in grid) or 1
    for i, gap in enumerate(gaps):
        for j, (field, label) in enumerate((("exposure_mean", "measured exposure (mean over seeds)"),
                                            ("prediction_mean", "predicted exposure (mean over seeds)"))):
            m = np.full((len(mults), len(ttls)), np.nan)
            for r in grid:
                if r["gap"] == gap and r[field] is not None:
                    m[mults.index(r["rate_multiplier"]), ttls.index(r["ttl"])] = r[field]
            ax = axes[i][j]
            im = ax.imshow(m, cmap="viridis", vmin=0, vmax=vmax, aspect="auto", origin="lower")
            for y in range(len(mults)):
                for x in range(len(ttls)):
                    if not np.isnan(m[y, x]):
                        ax.text(x, y, f"{m[y, x]:.0f}", ha="center", va="center", fontsize=8,
                                color="white" if m[y, x] < vmax / 2 else "black")
            ax.set_xticks(range(len(ttls)), [str(t) for t in ttls])
            ax.set_yticks(range(len(mults)), [f"x{m_}" for m_ in mults])
            ax.set_xlabel("TTL of every cached class (days)")
            ax.set_ylabel("daily change rates")
            ax.set_title(f"gap {gap}: {label}", fontsize=10)
            fig.colorbar(im, ax=ax, label="exposed tasks")
    fig.suptitle(title)
    return _save(fig, path)


def cost_frontier(points: Sequence[Mapping[str, Any]], path: Path, title: str) -> Path | None:
    """Stale answers against rows copied by refreshes, one series per allocation (points labelled by budget)."""
    usable = [p for p in points if p["refresh_rows"] is not None]
    if len(usable) < 2:
        return None
    plt = _plt()
    fig, ax = plt.subplots(figsize=(10, 5.5))
    groups: dict[str, list[Mapping[str, Any]]] = defaultdict(list)
    for p in usable:
        groups[p["allocation"]].append(p)
    for name, rows in sorted(groups.items()):
        rows = sorted(rows, key=lambda r: r["refresh_rows"])
        marker = "*" if name in ("tiered", "off") else "o"
        ax.plot([r["refresh_rows"] for r in rows], [r["stale_answers"] for r in rows], marker=marker,
                ms=12 if marker == "*" else 6, lw=1 if len(rows) > 1 else 0, label=name)
        for r in rows:
            if r["budget"]:
                ax.annotate(str(r["budget"]), (r["refresh_rows"], r["stale_answers"]), textcoords="offset points",
                            xytext=(4, 4), fontsize=7)
    ax.set_xlabel("rows copied by the planned refreshes over (T', T]")
    ax.set_ylabel("stale answers (freshness + mixed-vintage errors)")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend(title="allocation (labels: budget in refreshes)", fontsize=8)
    return _save(fig, path)


def verdict_bars(cells: Sequence[Mapping[str, Any]], path: Path, title: str) -> Path | None:
    """Verdict counts per arm and policy (mean over the sweep's cells of that arm and policy), stacked."""
    groups: dict[str, list[Mapping[str, Any]]] = defaultdict(list)
    for c in cells:
        if c["kind"] == "evaluated" and c["status"] == "done":
            groups[f"{c['arm']}\n{_side(c['policy'])}"].append(c)
    if not groups:
        return None
    plt = _plt()
    names = sorted(groups)
    fig, ax = plt.subplots(figsize=(max(6, 1.3 * len(names) + 3), 5.5))
    bottom = [0.0] * len(names)
    for v in VERDICTS:
        heights = [sum(c.get(v, 0) for c in groups[n]) / len(groups[n]) for n in names]
        if any(heights):
            ax.bar(names, heights, bottom=bottom, color=VERDICT_COLORS.get(v), label=v)
            bottom = [b + h for b, h in zip(bottom, heights, strict=True)]
    ax.set_ylabel("tasks (mean over the cells of each bar)")
    ax.set_title(title)
    ax.tick_params(axis="x", labelsize=7)
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1, 1))
    return _save(fig, path)


def stale_by_class(rows: Sequence[Mapping[str, Any]], path: Path, title: str) -> Path | None:
    """Stale answers attributed per entity class read stale, per arm and policy (summed over cells)."""
    classes = sorted({k.removeprefix("stale/") for r in rows for k in r if k.startswith("stale/")})
    if not classes:
        return None
    groups: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    for r in rows:
        name = f"{r['arm']}\n{_side(r['policy'])}"
        for c in classes:
            groups[name][c] += int(r.get(f"stale/{c}", 0))
    plt = _plt()
    names = sorted(groups)
    fig, ax = plt.subplots(figsize=(max(6, 1.3 * len(names) + 3), 5.5))
    bottom = [0.0] * len(names)
    for c in classes:
        heights = [groups[n][c] for n in names]
        ax.bar(names, heights, bottom=bottom, label=c)
        bottom = [b + h for b, h in zip(bottom, heights, strict=True)]
    ax.set_ylabel("stale answers that read the class stale (summed over cells)")
    ax.set_title(title)
    ax.tick_params(axis="x", labelsize=7)
    ax.legend(title="entity class", fontsize=8, loc="upper left", bbox_to_anchor=(1, 1))
    return _save(fig, path)


# --- windows of arrival days (issue 34): the mean with its band, each day a faint point -------------------------

SERIES_COLORS = ("tab:blue", "tab:red", "tab:green", "tab:purple", "tab:orange", "tab:brown", "tab:gray",
                 "tab:olive", "tab:cyan", "tab:pink")


def window_frontier(rows: Sequence[Mapping[str, Any]], path: Path, title: str) -> Path | None:
    """Window-mean exposure against refresh cost, per allocation: the refreshes the schedule makes over (T', T]
    (left) and the rows they copy (right, where the cell at T was evaluated); each window's mean with its 90%
    interval, its days as faint points."""
    if len(rows) < 2:
        return None
    plt = _plt()
    panels = [("refreshes", "refreshes planned over (T', T]")]
    if any(r.get("refresh_rows") is not None for r in rows):
        panels.append(("refresh_rows", "rows copied by the planned refreshes over (T', T]"))
    fig, axes = plt.subplots(1, len(panels), figsize=(7.5 * len(panels), 5.8), squeeze=False, sharey=True)
    groups: dict[str, list[Mapping[str, Any]]] = defaultdict(list)
    for r in rows:
        groups[r["allocation"]].append(r)
    for ax, (field, label) in zip(axes[0], panels, strict=True):
        for (name, g), color in zip(sorted(groups.items()), SERIES_COLORS, strict=False):
            g = sorted((r for r in g if r.get(field) is not None), key=lambda r: (r[field], r["budget"] or 0))
            if not g:
                continue
            xs = [r[field] for r in g]
            for r in g:
                ax.scatter([r[field]] * len(r["per_day"]), r["per_day"], s=6, color=color, alpha=0.15, linewidths=0)
            marker = "*" if name in ("tiered", "off") else "o"
            ax.errorbar(xs, [r["exposure_mean"] for r in g],
                        yerr=[[r["exposure_mean"] - r["exposure_lo"] for r in g],
                              [r["exposure_hi"] - r["exposure_mean"] for r in g]],
                        color=color, marker=marker, ms=12 if marker == "*" else 6, lw=1 if len(g) > 1 else 0,
                        elinewidth=1, capsize=3, label=name)
            for r in g:
                if r["budget"]:
                    ax.annotate(str(r["budget"]), (r[field], r["exposure_mean"]), textcoords="offset points",
                                xytext=(5, 4), fontsize=7)
        ax.set_xlabel(label)
        ax.grid(alpha=0.3)
    axes[0][0].set_ylabel("exposed tasks = stale answers of the deterministic agent\n(window mean, 90% interval; "
                          "faint: each day)")
    axes[0][-1].legend(title="allocation (labels: budget per 30 days)", fontsize=8)
    fig.suptitle(title)
    return _save(fig, path)


def ttl_window_means(grid: Sequence[Mapping[str, Any]], path: Path, title: str) -> Path | None:
    """Window-mean exposure against one TTL for every class, per rate multiplier: the mean over seeds of the window
    means, the band from the lowest to the highest bound of the seeds' 90% intervals, every day of every seed as a
    faint point."""
    if not grid:
        return None
    plt = _plt()
    fig, ax = plt.subplots(figsize=(10, 5.8))
    ttls = sorted({r["ttl"] for r in grid})
    position = {t: i for i, t in enumerate(ttls)}  # evenly spaced: the TTLs are 0, 1, 2, 4, 7, 14, 30
    mults = sorted({r["rate_multiplier"] for r in grid}, key=float)
    for m, color in zip(mults, SERIES_COLORS, strict=False):
        g = sorted((r for r in grid if r["rate_multiplier"] == m), key=lambda r: r["ttl"])
        xs = [position[r["ttl"]] + 0.06 * (mults.index(m) - len(mults) / 2) for r in g]
        for x, r in zip(xs, g, strict=True):
            ax.scatter([x] * len(r["per_day"]), r["per_day"], s=5, color=color, alpha=0.12, linewidths=0)
        ax.fill_between(xs, [r["band_lo"] for r in g], [r["band_hi"] for r in g], color=color, alpha=0.12)
        ax.plot(xs, [r["window_mean"] for r in g], color=color, marker="o", lw=2, label=f"rates x{m}")
    ax.set_xticks(range(len(ttls)), [str(t) for t in ttls])
    ax.set_xlabel("TTL of every cached class (days)")
    # Two lines: on one, the label is taller than the axes and tight_layout gives up (its left edge was cut off).
    ax.set_ylabel("exposed tasks, window mean over seeds\n(band: the seeds' 90% intervals; faint: each day)")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    return _save(fig, path)


def arrival_vs_gap(rows: Sequence[Mapping[str, Any]], path: Path, title: str) -> Path | None:
    """Stale answers against the gap, arrival-averaged (each gap the mean over its neighbouring gaps, band from
    their min to their max), each gap's single-day value as a faint point."""
    series: dict[str, list[Mapping[str, Any]]] = defaultdict(list)
    for r in rows:
        series[f"{r['arm']} ({_side(r['policy'])})"].append(r)
    if not series or max(len(v) for v in series.values()) < 2:
        return None
    plt = _plt()
    fig, ax = plt.subplots(figsize=(10, 5.5))
    for (name, g), color in zip(sorted(series.items()), SERIES_COLORS, strict=False):
        g = sorted(g, key=lambda r: r["gap"])
        gaps = [r["gap"] for r in g]
        ax.scatter(gaps, [r["stale_answers"] for r in g], s=14, color=color, alpha=0.3,
                   label=f"{name}: single day (T fixed)")
        ax.fill_between(gaps, [r["arrival_min"] for r in g], [r["arrival_max"] for r in g], color=color, alpha=0.12)
        ax.plot(gaps, [r["arrival_mean"] for r in g], color=color, lw=2,
                label=f"{name}: mean over gaps g-3..g+3 (band: their range)")
    ax.set_xlabel("gap T - T' (days)")
    ax.set_ylabel("stale answers (freshness + mixed-vintage errors)")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    return _save(fig, path)
