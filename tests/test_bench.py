"""`churnbench bench` smoke run on a 30-day world: ledger-side stages and the documents partition, each in a
process of its own, at two scales; the JSON, the table, the README block. No timing is asserted (timings belong
to the bench itself)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from churn_assets.benchmark.runner import README_BEGIN, README_END, update_readme
from churn_assets.cli import main

STAGES = "generate,verify,fold,documents"


@pytest.fixture(scope="module")
def bench_json(tmp_path_factory: pytest.TempPathFactory) -> dict:
    folder = tmp_path_factory.mktemp("bench")
    out = folder / "bench.json"
    result = CliRunner().invoke(main, ["bench", "--days", "30", "--scale", "1,2", "--stages", STAGES, "--repeats",
                                       "2", "--dir", str(folder / "work"), "--json", str(out)])
    assert result.exit_code == 0, result.output
    assert "generate + write the ledger" in result.output
    return json.loads(out.read_text())


def test_every_stage_is_measured_with_memory_and_load(bench_json: dict) -> None:
    for scale, repeats in (("1", 2), ("2", 2)):
        stages = bench_json["scales"][scale]["stages"]
        assert list(stages) == STAGES.split(",")
        for name, r in stages.items():
            assert len(r["seconds"]) == repeats
            assert r["median"] > 0 and r["peak_rss_mib"] > 10 and len(r["load_before"]) == 3, name
    one, two = (bench_json["scales"][s]["events"] for s in ("1", "2"))
    assert 1.5 * one < two < 2.5 * one  # the daily rates doubled, day 0 unchanged
    assert bench_json["ratios"]["x2_events_over_x1"] == round(two / one, 2)
    assert set(bench_json["ratios"]["x2_over_x1"]) == set(STAGES.split(","))


def test_same_config_same_ledger_as_the_world_command(bench_json: dict) -> None:
    assert bench_json["scales"]["1"]["world_id"] == bench_json["scales"]["1"]["stages"]["generate"]["extra"][
        "world_id"]
    assert bench_json["scales"]["2"]["world_id"] != bench_json["scales"]["1"]["world_id"]  # another config


def test_readme_block_is_replaced_from_the_json(bench_json: dict, tmp_path: Path) -> None:
    readme = tmp_path / "README.md"
    readme.write_text(f"# x\n\nbefore\n{README_BEGIN}\nold table\n{README_END}\nafter\n")
    update_readme(readme, bench_json)
    text = readme.read_text()
    assert "old table" not in text and text.startswith("# x\n\nbefore\n") and text.endswith("after\n")
    assert "| read + verify the ledger (streamed) |" in text
    (tmp_path / "b.json").write_text(json.dumps(bench_json))
    again = CliRunner().invoke(main, ["bench", "--from-json", str(tmp_path / "b.json"), "--markdown"])
    assert again.exit_code == 0 and again.output.strip() in text


def test_unknown_stage_is_one_line() -> None:
    result = CliRunner().invoke(main, ["bench", "--stages", "generate,nope"])
    assert result.exit_code != 0
    assert "unknown stage(s) nope" in result.output and "Traceback" not in result.output


def test_stages_get_what_they_need_first() -> None:
    from churn_assets.benchmark.runner import stage_order

    # truth + raw reads the cold paper's world: the untimed paper comes before it, not only before dbt.
    assert stage_order(["generate", "truth_raw", "dbt"], have_ledger=False) == [
        "generate", "paper_cold", "truth_raw", "dbt"]
    assert stage_order(["verify", "fold"], have_ledger=False) == ["generate", "verify", "fold"]
    assert stage_order(["verify"], have_ledger=True) == ["verify"]
    assert stage_order(["exposure_window"], have_ledger=False) == ["generate", "exposure_window"]  # issue 34's
    assert stage_order(["paper_cold", "dbt"], have_ledger=True) == ["paper_cold", "dbt"]


def test_large_scales_run_once_without_the_serial_paper() -> None:
    from churn_assets.benchmark.runner import stages_at

    every = ["generate", "paper_cold", "paper_cold_serial", "paper_warm", "dbt"]
    assert stages_at(every, 1) == every
    assert stages_at(every, 10) == ["generate", "paper_cold", "paper_warm", "dbt"]
