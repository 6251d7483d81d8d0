"""The sweep core without Dagster: specs and their cells, presets, budget-matched TTL policies, exposure-only
cells against the evaluated path's planning, the analysis tables and the report files."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path
from typing import Any

import pytest

from churn_assets.arms.registry import ARMS, TIERED_ARM, UNTIERED_ARM
from churn_assets.evaluation.paper import T
from churn_assets.freshness.policies import BudgetedTtl, parse_policy
from churn_assets.grounding.registry import load_registry
from churn_assets.sweeps import analysis
from churn_assets.sweeps.markdown import parse_table
from churn_assets.sweeps.presets import PRESETS, PresetArgs, customize, preset_spec, uniform_ttl
from churn_assets.sweeps.report import build_report
from churn_assets.sweeps.spec import Cell, SweepError, SweepSpec, WorldRecipe, cells, resolve_worlds

D = dt.date.fromisoformat
FIXED = {name: a.fixed_policy for name, a in ARMS.items()}


def _spec(**kw: Any) -> SweepSpec:
    base: dict[str, Any] = {"preset": "custom", "worlds": ("w-s1-aaaaaa",), "arms": (TIERED_ARM,),
                            "policies": ("tiered",), "t": T, "gaps": (1, 29)}
    return SweepSpec(**{**base, **kw})


def test_cells_expand_the_grid_once_each_and_a_fixed_policy_arm_once() -> None:
    spec = _spec(arms=(TIERED_ARM, UNTIERED_ARM), policies=("tiered", "off", "uniform:8"))
    evaluated, exposure = cells(spec, resolve_worlds(spec), FIXED)
    assert exposure == []
    keys = [(c.arm, c.policy, c.gap) for c in evaluated]
    assert len(keys) == len(set(keys)) == 3 * 2 + 1 * 2  # the untiered arm serves "off" whatever is asked
    assert {c.policy for c in evaluated if c.arm == UNTIERED_ARM} == {"off"}
    assert [c.t_prime for c in evaluated[:2]] == [T - dt.timedelta(days=29), T - dt.timedelta(days=1)]


def test_exposure_only_sweeps_evaluate_only_the_named_worlds() -> None:
    spec = _spec(worlds=("a-s1-aaaaaa", "b-s2-bbbbbb"), exposure_only=True, evaluate_worlds=(0,), evaluate_gaps=(29,))
    evaluated, exposure = cells(spec, resolve_worlds(spec), FIXED)
    assert [(c.world_id, c.gap) for c in evaluated] == [("a-s1-aaaaaa", 29)]
    assert len(exposure) == 4  # every cell's exposure, the evaluated one included (its equality is checked)


@pytest.mark.parametrize(("change", "message"), [
    ({"worlds": ()}, "no world"), ({"arms": ()}, "no arm"), ({"gaps": (), "t_primes": ()}, "no T'"),
    ({"gaps": (-1,)}, "cannot be negative"),
    ({"t_primes": (T + dt.timedelta(days=1),)}, "t_primes: T'=.* is after t \\(T="),
    ({"agent": "gpt"}, "agent 'gpt'"), ({"evaluate_worlds": (3,)}, "names no world"),
])
def test_a_bad_spec_says_what_is_wrong(change: dict[str, Any], message: str) -> None:
    with pytest.raises(SweepError, match=message):
        _spec(**change)


def test_an_unknown_arm_is_named() -> None:
    spec = _spec(arms=("grounding", "oracle"))
    with pytest.raises(SweepError, match="unknown arm 'oracle'"):
        cells(spec, resolve_worlds(spec), FIXED)


def test_a_spec_round_trips_and_its_id_is_its_content() -> None:
    spec = preset_spec("ttl-grid", PresetArgs(seeds=(7,)))
    again = SweepSpec.from_json(json.loads(json.dumps(spec.to_json())))
    assert again == spec and again.sweep_id == spec.sweep_id
    assert customize(spec, gaps=(3,)).sweep_id != spec.sweep_id
    assert preset_spec("ttl-grid", PresetArgs(seeds=(7,))).sweep_id == spec.sweep_id  # stable across processes


def test_the_presets_match_their_documentation() -> None:
    cache_age = preset_spec("cache-age")
    assert cache_age.gaps == tuple(range(1, 36)) and cache_age.arms == (TIERED_ARM, UNTIERED_ARM)
    ev, _ = cells(cache_age, resolve_worlds(cache_age), FIXED)
    assert len(ev) == 70

    grid = preset_spec("ttl-grid")
    worlds = resolve_worlds(grid)
    assert len(worlds) == 3 * 4 and len({w.world_id for w in worlds}) == 12
    ev, ex = cells(grid, worlds, FIXED)
    # Gaps 28 and 29 at T, and the 28-day window of T' = T - 29 (its last day is the gap-29 cell) exposure-only;
    # the first seed's worlds evaluated in full at T, no window day evaluated.
    assert len(ex) == 12 * 7 * (2 + 27) and len(ev) == 4 * 7 * 2 and {c.t for c in ev} == {T}
    x1 = [w for w in worlds[:4] if w.label.endswith("x1")]
    assert x1 and x1[0].world_id == "default-s42-2906f8"  # rates x1 is the default world itself
    x2 = next(w for w in worlds if w.label == "seed 42, rates x2")
    assert x2.config is not None and x2.config.data["rates_per_day"]["hires"] == pytest.approx(3.6)
    assert x2.config.data["reference_data"] == worlds[0].config.data["reference_data"]  # type: ignore[union-attr]

    budget = preset_spec("budget")
    ev, ex = cells(budget, resolve_worlds(budget), FIXED)
    # 18 policies (16 budgets, tiered, off) evaluated at T and on every 7th day of the window (T - 7, - 14, - 21),
    # T' = T - 29 always; the 28 days of each window exposure-only.
    assert len(ev) == 18 * 4 and {c.t_prime for c in ev} == {T - dt.timedelta(days=29)}
    assert {(T - c.t).days for c in ev} == {0, 7, 14, 21} and len(ex) == 18 * 28
    assert budget.saas_profile == "unlimited"

    seeds = preset_spec("seeds")
    ev, _ = cells(seeds, resolve_worlds(seeds), FIXED)
    assert len(ev) == 5 * 4
    assert set(PRESETS) >= {"cache-age", "ttl-grid", "budget", "seeds"}
    with pytest.raises(SweepError, match="unknown sweep preset"):
        preset_spec("nightly-ish")


def test_uniform_ttl_names_every_cached_class() -> None:
    policy = parse_policy(uniform_ttl(4))
    assert set(policy.effective_ttls(load_registry(), None, 180).values()) == {4}


@pytest.mark.parametrize("shape", ["rate", "tiers"])
@pytest.mark.parametrize("budget", [0, 4, 8, 16, 32])
def test_a_budgeted_ttl_policy_spends_at_most_its_budget(shape: str, budget: int) -> None:
    registry = load_registry()
    rates = {c.name: r for c, r in zip(registry.staged_classes, (3.5, 3.0, 0.15, 0.6, 0.05, 0.03), strict=True)}
    t_prime = T - dt.timedelta(days=29)
    policy = BudgetedTtl(budget, shape)  # type: ignore[arg-type]
    days = policy.refresh_days(registry, t_prime, t_prime + dt.timedelta(days=30), rates, 180)  # N per 30 days
    spent = sum(len(d) - 1 for d in days.values())
    assert spent <= budget
    # The smallest scale that fits uses most of it; whole-day TTLs move in steps (a hot class's TTL 1 -> 2 takes
    # its refreshes per 30 days from 15 to 10), so not all of it.
    assert spent >= 0.8 * budget
    assert all(d[0] == t_prime for d in days.values())


def test_budgeted_ttl_spellings() -> None:
    assert parse_policy("rate-matched:8") == BudgetedTtl(8, "rate")
    assert parse_policy("tier-shaped:8").policy_id.startswith("tierbudget8-")
    assert BudgetedTtl(8, "rate").needs_rates and not BudgetedTtl(8, "tiers").needs_rates


# --- analysis and report -------------------------------------------------------------------------


def _outcome(tmp: Path, arm: str, policy: str, gap: int, stale: int, rows: list[dict[str, Any]]) -> dict[str, Any]:
    folder = tmp / f"{arm}-{policy}-{gap}"
    folder.mkdir(parents=True)
    (folder / "tasks.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    cell = Cell("w-s1-aaaaaa", arm, policy, T - dt.timedelta(days=gap), T).to_json()
    return {"status": "done", "cell": cell, "stale_answers": stale, "exposure": stale, "prediction": stale + 0.5,
            "prediction_interval_90": [stale - 2, stale + 3], "verdicts": {"correct": 10 - stale,
                                                                         "freshness_error": stale},
            "results": str(folder), "reused": False, "refresh_rows": {"assignments": 100 * gap},
            "planned_vintage": {"assignments": (T - dt.timedelta(days=1)).isoformat()}}


def _row(verdict: str, stale_classes: list[str], served: str) -> dict[str, Any]:
    return {"verdict": verdict, "classes_stale": stale_classes, "served_vintage": {"assignments": served},
            "traces": [{"data_times": {"assignments": served}}]}


def test_the_report_has_its_tables_and_plots(tmp_path: Path) -> None:
    a1 = (T - dt.timedelta(days=1)).isoformat()
    outcomes = {}
    for policy, gap, stale in (("tiered", 26, 3), ("off", 26, 9), ("tiered", 27, 4), ("off", 27, 10)):
        arm = TIERED_ARM if policy == "tiered" else UNTIERED_ARM
        rows = [_row("freshness_error", ["assignments"], a1)] * stale + [_row("correct", [], a1)] * (10 - stale)
        outcomes[f"{arm}-{policy}-{gap}"] = _outcome(tmp_path / "runs", arm, policy, gap, stale, rows)
    spec = _spec(arms=(TIERED_ARM, UNTIERED_ARM), gaps=(26, 27), options={"parity_gaps": [26, 27]})
    record = {"sweep_id": spec.sweep_id, "spec": spec.to_json(), "outcomes": outcomes, "exposure_rows": []}
    report = build_report(record, tmp_path / "report", ["assignments", "prices"])
    assert [(r["gap"], r["tiered_stale"], r["off_stale"]) for r in report.data["parity"]] == [(26, 3, 9), (27, 4, 10)]
    assert {"stale_vs_gap", "served_age", "verdict_bars", "stale_by_class"} <= set(report.figures)
    for path in report.figures.values():
        assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert (tmp_path / "report" / "cells.csv").read_text().count("\n") == 5
    ages = analysis.served_ages(record, ["assignments"])
    assert {(a["source"], a["age_days"]) for a in ages} == {("observed", 1)}
    by_class = analysis.stale_by_class(record)
    assert sorted(r["stale/assignments"] for r in by_class) == [3, 4, 9, 10]
    inline = report.markdown_inline()
    assert "data:image/png;base64," in inline and "](stale_vs_gap.png)" in report.markdown


def test_a_custom_grid_has_its_own_id_and_its_report_names_its_grid(tmp_path: Path) -> None:
    """A grid changed in the Launchpad or on the command line is `custom-<hash>` and says what ran; the preset's
    own grid keeps its id (stored sweeps keep loading), and so does a SaaS profile alone."""
    smoke = preset_spec("smoke")
    assert smoke.sweep_id.startswith("smoke-") and "custom" not in smoke.to_json()
    assert SweepSpec.from_json(smoke.to_json()).sweep_id == smoke.sweep_id
    assert customize(smoke, gaps=(1, 28)).sweep_id == smoke.sweep_id  # the preset's own values: not custom
    assert customize(smoke, saas_profile="unlimited").sweep_id.startswith("smoke-")
    custom = customize(smoke, arms=("grounding",), gaps=(7, 28))
    assert custom.sweep_id.startswith("custom-") and custom.custom and custom.preset == "smoke"
    assert SweepSpec.from_json(custom.to_json()).sweep_id == custom.sweep_id
    assert "naive" not in custom.description and "gaps T - T' of 7, 28 day(s)" in custom.description
    record = {"sweep_id": custom.sweep_id, "spec": custom.to_json(), "outcomes": {}, "exposure_rows": []}
    report = build_report(record, tmp_path / "report", ["assignments"])
    grid = {r["what"]: r["values"] for r in parse_table(report.markdown.split("## Grid", 1)[1])}
    assert grid["arms"] == "grounding" and grid["T"] == "2024-01-30" and grid["agent"] == "deterministic"
    assert grid["T'"].startswith("gaps T - T' of 7, 28 day(s)") and grid["worlds"] == "seed 42, 30 days"
    assert report.markdown.startswith(f"# Sweep `{custom.sweep_id}` (a custom grid from the `smoke` preset)")
    # once it has cells, the report names its worlds by id too (issue 46), as the UI and `worlds list` do
    cell = {"world_id": "smoke-s42-abcdef", "arm": "grounding", "policy": "tiered", "t_prime": "2024-01-23",
            "t": "2024-01-30"}
    record["outcomes"] = {"k": {"cell": cell, "status": "pending"}}
    report = build_report(record, tmp_path / "report2", ["assignments"])
    grid = {r["what"]: r["values"] for r in parse_table(report.markdown.split("## Grid", 1)[1])}
    assert grid["worlds"] == "seed 42, 30 days (ids: smoke-s42-abcdef)"


def test_the_seeds_summary_pairs_by_seed_and_is_seeded() -> None:
    cells_ = []
    for world, (on, off) in {"a": (3, 10), "b": (5, 9), "c": (4, 12)}.items():
        for policy, stale in (("tiered", on), ("off", off)):
            cells_.append({"kind": "evaluated", "status": "done", "world_id": world, "world_label": world,
                           "policy": policy, "gap": 29, "stale_answers": stale})
    s1 = analysis.seeds_summary(cells_, {"D+28": 29})
    s2 = analysis.seeds_summary(cells_, {"D+28": 29})
    d = s1["differences"]["D+28"]
    assert d["per_seed"] == [7, 4, 8] and d["mean_off_minus_on"] == pytest.approx(19 / 3, abs=0.01)
    lo, hi = d["interval_90"]
    assert 4 <= lo <= d["mean_off_minus_on"] <= hi <= 8
    assert s1 == s2


def test_the_ttl_grid_checks_stale_against_exposure() -> None:
    base = {"status": "done", "ttl": 2, "gap": 29, "policy": "ttl:x=2"}
    rows = [{**base, "kind": "exposure-only", "world_label": f"seed {s}, rates x2", "exposure": e, "prediction": p}
            for s, e, p in ((1, 10, 9.0), (2, 14, 12.0))]
    rows.append({**base, "kind": "evaluated", "world_label": "seed 1, rates x2", "stale_answers": 10, "exposure": 10})
    [g] = analysis.ttl_grid(rows)
    assert (g["rate_multiplier"], g["exposure_min"], g["exposure_max"], g["exposure_mean"]) == ("2", 10, 14, 12.0)
    assert g["stale_equals_exposure"] is True
    rows[-1]["stale_answers"] = 11
    assert analysis.ttl_grid(rows)[0]["stale_equals_exposure"] is False


def test_a_world_recipe_resolves_without_writing(tmp_path: Path) -> None:
    recipe = WorldRecipe(7, overrides=("rates_per_day.hires=2.0",), name="hires", label="x")
    [w] = resolve_worlds(_spec(worlds=(recipe,)))
    assert w.world_id.startswith("hires-s7-") and w.config is not None


def test_exposure_only_keeps_the_grid_and_refuses_presets_without_it() -> None:
    from churn_assets.sweeps.presets import exposure_only_spec

    grid = exposure_only_spec(preset_spec("ttl-grid", PresetArgs(seeds=(7,))))
    ev, ex = cells(grid, resolve_worlds(grid), FIXED)
    assert ev == [] and len(ex) == 4 * 7 * (2 + 27)
    with pytest.raises(SweepError, match="--exposure-only needs a preset with exposure-only cells"):
        exposure_only_spec(preset_spec("budget"))


def test_the_saas_profile_is_the_presets_unless_given(monkeypatch: pytest.MonkeyPatch) -> None:
    from click.testing import CliRunner

    from churn_assets.cli import main

    spec = preset_spec("smoke")
    assert spec.saas_profile == "default"
    other = customize(spec, saas_profile="reference")
    ev, _ = cells(other, resolve_worlds(other), FIXED)
    assert {c.saas_profile for c in ev} == {"reference"} and other.sweep_id != spec.sweep_id
    # The CLI offers the scenarios' profiles and hands the choice to `customize` (as the Launchpad does).
    seen: dict[str, Any] = {}

    def stop(*args: Any, **kwargs: Any) -> Any:
        seen.update(kwargs)
        raise SystemExit(3)

    monkeypatch.setattr("churn_assets.commands.sweep.customize", stop)
    result = CliRunner().invoke(main, ["sweep", "--preset", "smoke", "--saas-profile", "reference"])
    assert result.exit_code == 3 and seen["saas_profile"] == "reference"
    result = CliRunner().invoke(main, ["sweep", "--preset", "smoke", "--saas-profile", "nosuch"])
    assert result.exit_code == 2 and "nosuch" in result.output


# --- windows of arrival days (issue 34) ------------------------------------------------------------------------


def test_a_window_spec_lists_its_days_and_keeps_other_sweep_ids() -> None:
    spec = _spec(gaps=(5,), window_days=3, window_gaps=(5,), window_evaluate_every=2, saas_profile="unlimited")
    tp = T - dt.timedelta(days=5)
    assert spec.window_cells() == [(tp, T - dt.timedelta(days=2), True), (tp, T - dt.timedelta(days=1), False),
                                   (tp, T, True)]
    again = SweepSpec.from_json(json.loads(json.dumps(spec.to_json())))
    assert again == spec and again.sweep_id == spec.sweep_id
    ev, ex = cells(spec, resolve_worlds(spec), FIXED)
    assert [c.t for c in ex] == [T - dt.timedelta(days=2), T - dt.timedelta(days=1), T]  # the T cell is shared
    assert [c.t for c in ev] == [T, T - dt.timedelta(days=2)]
    # A spec without a window writes no window field: the sweep ids of the presets without one did not move.
    assert not any(k.startswith("window") for k in preset_spec("cache-age").to_json())
    with pytest.raises(SweepError, match="starts before T' = T - 1"):
        _spec(gaps=(1,), window_days=3, window_gaps=(1,))
    with pytest.raises(SweepError, match="only on the `unlimited` SaaS plan"):
        _spec(gaps=(5,), window_days=3, window_gaps=(5,), window_evaluate_every=1)
    with pytest.raises(SweepError, match="needs the gaps of its T'"):
        _spec(window_days=3)
    with pytest.raises(SweepError, match="only on the `unlimited` SaaS plan"):
        customize(preset_spec("budget"), saas_profile="default")


def _window_record(tmp: Path) -> dict[str, Any]:
    """A budget-like sweep with a 3-day window (T' = T - 5): two policies' exposure-only days, the cells at T
    evaluated with their refresh rows."""
    spec = _spec(arms=(TIERED_ARM, UNTIERED_ARM), policies=("uniform:8",), gaps=(5,), window_days=3,
                 window_gaps=(5,), options={"budgets": [8], "allocations": ["uniform"]})
    tp = (T - dt.timedelta(days=5)).isoformat()
    rows = []
    for arm, policy, per_day in ((TIERED_ARM, "uniform:8", (4, 0, 2)), (UNTIERED_ARM, "off", (6, 7, 9))):
        for back, exposed in zip((2, 1, 0), per_day, strict=True):
            cell = Cell("w-s1-aaaaaa", arm, policy, T - dt.timedelta(days=5), T - dt.timedelta(days=back)).to_json()
            by_template = {"t1_hires": exposed // 2, "t1_list_price": exposed - exposed // 2}
            rows.append({"cell": cell, "exposure": exposed, "degenerate_exposure": 0, "prediction": exposed + 0.5,
                         "prediction_interval_90": [0, exposed + 2], "served_vintage": {"assignments": tp},
                         "refresh_days": {"assignments": [tp, (T - dt.timedelta(days=1)).isoformat()]}
                         if policy != "off" else {"assignments": [tp]},
                         "exposed_by_template": {k: v for k, v in by_template.items() if v}})
    outcomes = {}
    for arm, policy, stale in ((TIERED_ARM, "uniform:8", 2), (UNTIERED_ARM, "off", 9)):
        rows_ = [_row("freshness_error", ["assignments"], tp)] * stale + [_row("correct", [], tp)] * (10 - stale)
        outcomes[f"{arm}-{policy}"] = _outcome(tmp / "runs", arm, policy, 5, stale, rows_)
    return {"sweep_id": spec.sweep_id, "spec": spec.to_json(), "outcomes": outcomes, "exposure_rows": rows}


def test_the_window_table_and_the_budget_report(tmp_path: Path) -> None:
    record = _window_record(tmp_path)
    windows = {r["policy"]: r for r in analysis.window_table(record)}
    uniform, off = windows["uniform:8"], windows["off"]
    assert uniform["per_day"] == [4, 0, 2] and uniform["exposure_mean"] == 2.0 and uniform["days"] == 3
    assert (uniform["exposure_min"], uniform["exposure_max"]) == (0, 4)
    assert uniform["exposure_lo"] <= 2.0 <= uniform["exposure_hi"] and uniform["prediction_mean"] == 2.5
    assert uniform["refreshes"] == 1 and off["refreshes"] == 0 and uniform["allocation"] == "uniform"
    assert uniform["refresh_rows"] == 500 and uniform["budget"] == 8 and off["allocation"] == "off"
    assert uniform["evaluated_days"] == [T.isoformat()] and uniform["stale_equals_exposure"] is True
    report = build_report(record, tmp_path / "report", ["assignments"])
    assert {"window_frontier", "cost_frontier"} <= set(report.figures)
    assert "over 3 arrival days" in report.markdown and "at T = 2024-04-27 alone" in report.markdown
    assert [r["policy"] for r in report.data["budget"]] == ["off", "uniform:8"]  # the cells at T only
    # A window whose days are not all there yet is left out, not averaged over fewer days.
    record["exposure_rows"] = record["exposure_rows"][1:]
    assert [r["policy"] for r in analysis.window_table(record)] == ["off"]


def test_the_arrival_averaged_curve_of_cache_age() -> None:
    stale = {1: 10, 2: 2, 3: 12, 4: 4, 5: 14, 6: 6, 7: 16, 8: 8, 9: 18}
    cells_ = [{"kind": "evaluated", "status": "done", "world_id": "w", "arm": TIERED_ARM, "policy": "tiered",
               "gap": g, "stale_answers": s} for g, s in stale.items()]
    rows = {r["gap"]: r for r in analysis.arrival_averaged(cells_)}
    assert rows[5]["arrival_mean"] == round(sum(stale[g] for g in range(2, 9)) / 7, 2) and rows[5]["gaps"] == 7
    assert (rows[5]["arrival_min"], rows[5]["arrival_max"]) == (2, 16) and rows[5]["stale_answers"] == 14
    assert rows[1]["gaps"] == 4 and rows[1]["arrival_mean"] == (10 + 2 + 12 + 4) / 4  # the end
