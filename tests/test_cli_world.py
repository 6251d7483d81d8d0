"""`churnbench generate` and `churnbench ledger verify` through the real console entry point."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from click.testing import CliRunner

from churn_assets.cli import main


def test_help_everywhere() -> None:
    runner = CliRunner()
    for args in (["--help"], ["generate", "--help"], ["ledger", "--help"], ["ledger", "verify", "--help"]):
        result = runner.invoke(main, args)
        assert result.exit_code == 0, (args, result.output)
        assert "Usage:" in result.output


def test_generate_then_verify(tmp_path: Path) -> None:
    runner = CliRunner()
    out = tmp_path / "w"
    result = runner.invoke(main, ["generate", "--days", "7", "--seed", "3", "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert "default-s3-" in result.output and "user_hired" in result.output and "users" in result.output
    result = runner.invoke(main, ["ledger", "verify", str(out)])
    assert result.exit_code == 0, result.output
    assert result.output.startswith("OK:")


def test_verify_failure_is_one_line_and_nonzero(tmp_path: Path) -> None:
    out = tmp_path / "w"
    assert CliRunner().invoke(main, ["generate", "--days", "3", "--out", str(out)]).exit_code == 0
    lines = (out / "ledger.jsonl").read_text().splitlines(keepends=True)
    rec = json.loads(lines[4])
    rec["kind"] = "mystery"
    lines[4] = json.dumps(rec, sort_keys=True, separators=(",", ":")) + "\n"
    (out / "ledger.jsonl").write_text("".join(lines))
    proc = subprocess.run([sys.executable, "-m", "churn_assets", "ledger", "verify", str(out)],
                          capture_output=True, text=True)
    assert proc.returncode == 1
    assert proc.stderr.strip().count("\n") == 0, proc.stderr
    assert "line 5" in proc.stderr and "unknown event kind 'mystery'" in proc.stderr


def test_bad_override_is_one_line(tmp_path: Path) -> None:
    proc = subprocess.run([sys.executable, "-m", "churn_assets", "generate", "--set", "rates_per_day.x=1",
                           "--out", str(tmp_path / "w")], capture_output=True, text=True)
    assert proc.returncode == 1
    assert "unknown key" in proc.stderr and "Traceback" not in proc.stderr


def test_bad_value_and_bad_file_are_one_line(tmp_path: Path) -> None:
    proc = subprocess.run([sys.executable, "-m", "churn_assets", "generate", "--set", "rates_per_day.hires=-1",
                           "--out", str(tmp_path / "w")], capture_output=True, text=True)
    assert proc.returncode == 1 and proc.stderr.count("\n") == 1, proc.stderr
    assert proc.stderr == "churnbench: error: world config: rates_per_day.hires must be a number >= 0 (got -1)\n"
    bad = tmp_path / "bad.yaml"
    bad.write_text("calendar:\n  dayz: 3\n")
    result = CliRunner().invoke(main, ["generate", "--config", str(bad), "--out", str(tmp_path / "w")])
    assert result.exit_code == 1
    assert f"world config {bad}: unknown key 'calendar.dayz'" in result.output and "Traceback" not in result.output


def test_a_v1_ledger_loads_unverified(tmp_path: Path) -> None:
    # A format-1 (ChurnBench v1) ledger: records without recorded_at or a hash chain, and no manifest.
    records = [
        {"seq": 0, "at": "2024-01-01", "kind": "price_changed", "entity_type": "product", "entity_id": "prd_0000",
         "payload": {"unit_price_usd": 391.5, "reason": "initial"}},
        {"seq": 1, "at": "2024-01-01", "kind": "user_hired", "entity_type": "user", "entity_id": "usr_000000",
         "payload": {"cost_center_id": "cc_001"}},
        {"seq": 2, "at": "2024-01-02", "kind": "user_offboarded", "entity_type": "user", "entity_id": "usr_000000",
         "payload": {}},
    ]
    ref = tmp_path / "v1-ledger.jsonl"
    ref.write_text("".join(json.dumps(r) + "\n" for r in records))
    result = CliRunner().invoke(main, ["ledger", "verify", str(ref)])
    assert result.exit_code == 0, result.output
    assert "unverified" in result.output and "format 1" in result.output
