"""The sweep report: tables, plots and a Markdown summary, written under `<results>/sweeps/<sweep id>/`
(`report.md`, `report.json`, `cells.csv`, `served_ages.csv`, PNGs). `build_report` is pure apart from writing
its folder; the `sweep_report` asset shows the same Markdown in the UI with the plots inlined.
"""

from __future__ import annotations

import base64
import csv
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from churn_assets.sweeps import analysis, markdown, plots
from churn_assets.sweeps.spec import SweepSpec

CELL_COLUMNS = ("kind", "status", "world_id", "world_label", "arm", "policy", "ttl", "t_prime", "t", "gap",
                "stale_answers", "exposure", "degenerate_exposure", "prediction", "prediction_lo", "prediction_hi",
                "accuracy", "correct", "freshness_error", "mixed_vintage_error", "unattributed_error",
                "reasoning_error", "parse_failure", "transport_failure", "mean_cost_units", "refreshes",
                "refresh_rows", "reused", "experiment_hash", "error", "results")


@dataclass(frozen=True)
class Report:
    folder: Path
    markdown: str  # with relative image links (report.md)
    figures: dict[str, Path]  # name -> PNG
    data: dict[str, Any]  # report.json

    def markdown_inline(self) -> str:
        """The Markdown with each plot inlined as a data URI (the Dagster UI renders it in asset metadata)."""
        text = self.markdown
        for path in self.figures.values():
            encoded = base64.b64encode(path.read_bytes()).decode()
            text = text.replace(f"]({path.name})", f"](data:image/png;base64,{encoded})")
        return text


def _write_csv(path: Path, rows: Sequence[Mapping[str, Any]], columns: Sequence[str] | None = None) -> None:
    cols = list(columns or dict.fromkeys(k for r in rows for k in r))
    with path.open("w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=cols, extrasaction="ignore", lineterminator="\n")
        writer.writeheader()
        writer.writerows(rows)


def build_report(record: Mapping[str, Any], folder: Path, cached_classes: Sequence[str]) -> Report:
    """Every table and plot the sweep's cells support, written to `folder`."""
    folder.mkdir(parents=True, exist_ok=True)
    spec = record["spec"]
    sweep_id = record["sweep_id"]
    options = spec.get("options") or {}
    cells = analysis.cell_table(record)
    ages = analysis.served_ages(record, cached_classes)
    by_class = analysis.stale_by_class(record)
    _write_csv(folder / "cells.csv", cells, CELL_COLUMNS)
    _write_csv(folder / "served_ages.csv", ages)
    if by_class:
        _write_csv(folder / "stale_by_class.csv", by_class)

    figures: dict[str, Path] = {}

    def add(name: str, path: Path | None) -> None:
        if path is not None:
            figures[name] = path

    t = spec["t"]
    # The single-day figures are at the sweep's T; a window's other days (cells of an earlier T) have their own.
    single_day = [c for c in cells if c["t"] == t]
    add("stale_vs_gap", plots.stale_vs_gap(single_day, folder / "stale_vs_gap.png",
                                           f"Stale answers against cache age (T = {t})"))
    add("served_age", plots.served_age([a for a in ages if a["t"] == t], folder / "served_age.png",
                                       f"Age at T = {t} of the data served, per class (observed in the reads)"))
    data: dict[str, Any] = {"sweep_id": sweep_id, "spec": spec, "started": record.get("started"),
                            "finished": record.get("finished"), "cells": cells}
    sections: list[str] = []
    evaluated = [c for c in cells if c["kind"] == "evaluated"]
    done = [c for c in evaluated if c["status"] == "done"]
    failed = [c for c in evaluated if c["status"] == "failed"]
    skipped = [c for c in evaluated if c["status"] == "skipped"]
    reused = sum(1 for c in done if c.get("reused"))

    windows = analysis.window_table(record)
    if windows:
        data["windows"] = windows
    if options.get("parity_gaps"):
        averaged = analysis.arrival_averaged(single_day)
        data["arrival_averaged"] = averaged
        add("arrival_vs_gap", plots.arrival_vs_gap(averaged, folder / "arrival_vs_gap.png",
                                                   f"Stale answers against cache age, arrival-averaged (T = {t})"))
        parity = analysis.parity_table(single_day, options["parity_gaps"])
        data["parity"] = parity
        sections.append("## The 2x2 around D+28 (stale answers, tiered vs off)\n\n" + markdown.table(
            parity, ["gap", "t_prime", "tiered_stale", "off_stale", "off_over_tiered", "tiered_exposure",
                     "off_exposure"],
            ["gap (days)", "T'", "tiered", "off", "off / tiered", "tiered exposure", "off exposure"]))
    if options.get("ttls"):
        grid = analysis.ttl_grid(single_day)
        data["ttl_grid"] = grid
        add("ttl_heatmap", plots.ttl_heatmap(grid, folder / "ttl_heatmap.png",
                                             "Exposure against one TTL for every class and the change rate"))
        checked = [g for g in grid if g["stale_equals_exposure"] is not None]
        sections.append("## TTL x change rate (exposure over seeds; evaluated cells: stale answers)\n\n"
                        + markdown.table(grid, ["ttl", "rate_multiplier", "gap", "seeds", "exposure_min",
                                                "exposure_mean", "exposure_max", "prediction_mean", "evaluated_stale",
                                                "stale_equals_exposure"])
                        + f"\nStale answers equal exposure in {sum(g['stale_equals_exposure'] for g in checked)} of "
                          f"{len(checked)} evaluated grid cells.\n")
        if windows:
            means = analysis.ttl_window(windows)
            data["ttl_window"] = means
            add("ttl_window", plots.ttl_window_means(means, folder / "ttl_window.png",
                                                     f"Exposure over {windows[0]['days']} arrival days (T' = "
                                                     f"{windows[0]['t_prime']}) against one TTL for every class"))
            sections.append(f"## TTL x change rate over {windows[0]['days']} arrival days ({windows[0]['first']} .. "
                            f"{windows[0]['t']}, T' = {windows[0]['t_prime']})\n\n" + markdown.table(
                                means, ["ttl", "rate_multiplier", "seeds", "window_mean", "seed_min", "seed_max",
                                        "band_lo", "band_hi", "prediction_mean"],
                                ["TTL", "rates x", "seeds", "window mean (mean over seeds)", "lowest seed",
                                 "highest seed", "90% band lo", "90% band hi", "predicted"]))
    if options.get("budgets"):
        frontier = analysis.budget_frontier(single_day)
        data["budget"] = frontier
        if windows:
            add("window_frontier", plots.window_frontier(
                windows, folder / "window_frontier.png",
                f"Staleness over {windows[0]['days']} arrival days against refresh cost (T' = {windows[0]['t_prime']}, "
                f"T = {windows[0]['first']} .. {windows[0]['t']})"))
            sections.append(f"## Staleness against refresh cost over {windows[0]['days']} arrival days "
                            f"({windows[0]['first']} .. {windows[0]['t']}, T' = {windows[0]['t_prime']})\n\n"
                            + markdown.table(sorted(windows, key=lambda r: (r["allocation"], r["budget"] or 0)),
                                        ["allocation", "budget", "refreshes", "refresh_rows", "exposure_mean",
                                         "exposure_lo", "exposure_hi", "exposure_min", "exposure_max",
                                         "prediction_mean", "evaluated_days", "stale_equals_exposure"],
                                        ["allocation", "budget / 30 days", "refreshes", "rows copied",
                                         "exposure (window mean)", "90% lo", "90% hi", "min", "max", "predicted",
                                         "evaluated days", "stale = exposure there"]))
        add("cost_frontier", plots.cost_frontier(frontier, folder / "cost_frontier.png",
                                                 f"Staleness against refresh cost at T = {t} alone (T' = T - 29)"))
        sections.append(f"## Staleness against refresh cost at T = {t} alone\n\n" + markdown.table(
            frontier, ["allocation", "budget", "refreshes", "refresh_rows", "stale_answers", "exposure"]))
    if options.get("windows"):
        seeds = analysis.seeds_summary(single_day, options["windows"])
        data["seeds"] = seeds
        diff_rows = [{"window": w, **{k: v for k, v in d.items() if k != "per_seed"}}
                     for w, d in seeds["differences"].items()]
        # World and label first, then the cells in the 2x2's reading order (the dict's own order is arrival order).
        columns = sorted({k for row in seeds["per_world"] for k in row} - {"world_id", "label"})
        sections.append("## The 2x2 over seeds\n\n"
                        + markdown.table(seeds["per_world"], ["world_id", "label", *columns])
                        + "\nOff minus tiered (stale answers), paired by seed, bootstrap 90% interval over seeds:\n\n"
                        + markdown.table(diff_rows, ["window", "seeds", "mean_off_minus_on", "interval_90"]))
    if int(spec.get("repeats", 1)) > 1:
        repeats = analysis.repeats_table(record)
        data["repeats"] = repeats
        _write_csv(folder / "repeats.csv", repeats)
        sections.append(f"## Repeats ({spec['repeats']} per cell)\n\n" + markdown.table(
            repeats, ["arm", "policy", "gap", "accuracy_mean", "accuracy_lo", "accuracy_hi", "pass_hat_k",
                      "pass_at_k", "stability", "stale_answers_mean", "median_tool_calls", "median_seconds",
                      "aware_share", "stale_revealed_share"],
            ["arm", "policy", "gap", "accuracy (mean)", "90% low", "90% high", f"pass^{spec['repeats']}",
             f"pass@{spec['repeats']}", "stability", "stale (mean)", "tool calls (median)", "seconds (median)",
             "as-of = oldest read", "stale revealed"])
            + "\nIntervals: bootstrap over templates (clustered); pass^K as tau-bench defines it (every repeat "
              "correct); stability: the share of tasks whose repeats gave one answer. `repeats.csv` has every "
              "column.\n")
    add("verdict_bars", plots.verdict_bars(cells, folder / "verdict_bars.png", "Verdicts per arm and policy"))
    add("stale_by_class", plots.stale_by_class(by_class, folder / "stale_by_class.png",
                                               "Stale answers attributed per entity class read stale"))

    grid_rows = SweepSpec.from_json(spec).grid()
    # The worlds by id too (issue 46: a report named them by seed and days only, and the UI, `worlds list` and the
    # results folders name them by id), in the order the cells first name them.
    ids = list(dict.fromkeys(c["world_id"] for c in cells if c.get("world_id")))
    if ids:
        grid_rows = [(k, f"{v} (ids: {', '.join(ids)})" if k == "worlds" else v) for k, v in grid_rows]
    data["grid"] = dict(grid_rows)
    based_on = f" (a custom grid from the `{spec['preset']}` preset)" if spec.get("custom") else ""
    head = [f"# Sweep `{sweep_id}`{based_on}", "", spec.get("description") or "", "",
            "## Grid", "", markdown.table([{"what": k, "values": v} for k, v in grid_rows], ["what", "values"]), "",
            f"- cells evaluated: {len(done)} done ({reused} reused from earlier runs), {len(failed)} failed, "
            f"{len(skipped)} skipped (LLM budget cap), {len(evaluated) - len(done) - len(failed) - len(skipped)} "
            "pending",
            f"- exposure-only cells: {sum(1 for c in cells if c['kind'] == 'exposure-only')}",
            f"- started {record.get('started') or '-'}, finished {record.get('finished') or '(running)'}",
            f"- files: `{folder}` (cells.csv, served_ages.csv, report.json, the PNGs below)", ""]
    if failed:
        head += ["## Failed cells", "", markdown.table(failed, ["arm", "policy", "t_prime", "world_id", "error"])]
    summary_cols = ["arm", "policy", "gap", "stale_answers", "exposure", "prediction", "accuracy", "reused"]
    if len(done) <= 40:
        head += ["## Cells", "", markdown.table(sorted(done, key=lambda c: (c["arm"], c["policy"], c["gap"])),
                                           summary_cols)]
    figs = [f"![{name}]({path.name})\n" for name, path in figures.items()]
    text = "\n".join(head) + "\n" + "\n".join(sections) + "\n## Plots\n\n" + "\n".join(figs)
    (folder / "report.md").write_text(text)
    data["figures"] = {k: str(v) for k, v in figures.items()}
    (folder / "report.json").write_text(json.dumps(data, indent=1, sort_keys=True, default=str) + "\n")
    return Report(folder, text, figures, data)
