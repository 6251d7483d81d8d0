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
    add("stale_vs_gap", plots.stale_vs_gap(cells, folder / "stale_vs_gap.png",
                                           f"Stale answers against cache age (T = {t})"))
    add("served_age", plots.served_age(ages, folder / "served_age.png",
                                       f"Age at T = {t} of the data served, per class (observed in the reads)"))
    data: dict[str, Any] = {"sweep_id": sweep_id, "spec": spec, "started": record.get("started"),
                            "finished": record.get("finished"), "cells": cells}
    sections: list[str] = []
    evaluated = [c for c in cells if c["kind"] == "evaluated"]
    done = [c for c in evaluated if c["status"] == "done"]
    failed = [c for c in evaluated if c["status"] == "failed"]
    skipped = [c for c in evaluated if c["status"] == "skipped"]
    reused = sum(1 for c in done if c.get("reused"))

    if options.get("parity_gaps"):
        parity = analysis.parity_table(cells, options["parity_gaps"])
        data["parity"] = parity
        sections.append("## The 2x2 around D+28 (stale answers, tiered vs off)\n\n" + markdown.table(
            parity, ["gap", "t_prime", "tiered_stale", "off_stale", "off_over_tiered", "tiered_exposure",
                     "off_exposure"],
            ["gap (days)", "T'", "tiered", "off", "off / tiered", "tiered exposure", "off exposure"]))
    if options.get("ttls"):
        grid = analysis.ttl_grid(cells)
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
    if options.get("budgets"):
        frontier = analysis.budget_frontier(cells)
        data["budget"] = frontier
        add("cost_frontier", plots.cost_frontier(frontier, folder / "cost_frontier.png",
                                                 f"Staleness against refresh cost (T' = T - 29, T = {t})"))
        sections.append("## Staleness against refresh cost\n\n" + markdown.table(
            frontier, ["allocation", "budget", "refreshes", "refresh_rows", "stale_answers", "exposure"]))
    if options.get("windows"):
        seeds = analysis.seeds_summary(cells, options["windows"])
        data["seeds"] = seeds
        diff_rows = [{"window": w, **{k: v for k, v in d.items() if k != "per_seed"}}
                     for w, d in seeds["differences"].items()]
        # World and label first, then the cells in the 2x2's reading order (the dict's own order is arrival order).
        columns = sorted({k for row in seeds["per_world"] for k in row} - {"world_id", "label"})
        sections.append("## The 2x2 over seeds\n\n"
                        + markdown.table(seeds["per_world"], ["world_id", "label", *columns])
                        + "\nOff minus tiered (stale answers), paired by seed, bootstrap 90% interval over seeds:\n\n"
                        + markdown.table(diff_rows, ["window", "seeds", "mean_off_minus_on", "interval_90"]))
    add("verdict_bars", plots.verdict_bars(cells, folder / "verdict_bars.png", "Verdicts per arm and policy"))
    add("stale_by_class", plots.stale_by_class(by_class, folder / "stale_by_class.png",
                                               "Stale answers attributed per entity class read stale"))

    grid = SweepSpec.from_json(spec).grid()
    data["grid"] = dict(grid)
    based_on = f" (a custom grid from the `{spec['preset']}` preset)" if spec.get("custom") else ""
    head = [f"# Sweep `{sweep_id}`{based_on}", "", spec.get("description") or "", "",
            "## Grid", "", markdown.table([{"what": k, "values": v} for k, v in grid], ["what", "values"]), "",
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
