"""World config: defaults, overrides, validation and world ids."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from churn_assets.world.config import WorldConfigError, config_from_data, load_config


def test_defaults_and_world_id() -> None:
    c = load_config()
    assert c.name == "default" and c.seed == 42
    assert c.start.isoformat() == "2024-01-01" and c.days == 180
    assert c.end.isoformat() == "2024-06-28"
    assert re.fullmatch(r"default-s42-[0-9a-f]{6}", c.world_id)
    assert c.world_id.endswith(c.config_hash[:6])


def test_overrides_change_the_hash() -> None:
    base = load_config()
    assert load_config(seed=7).world_id.startswith("default-s7-")
    assert load_config(overrides=["rates_per_day.hires=2.5"]).config_hash != base.config_hash
    assert load_config(overrides=["rates_per_day.hires=2.5"]).section("rates_per_day")["hires"] == 2.5
    # 2 and 2.0 are the same rate and the same world.
    assert load_config(overrides=["rates_per_day.hires=2"]).config_hash == \
        load_config(overrides=["rates_per_day.hires=2.0"]).config_hash


def test_partial_file_merges_over_defaults(tmp_path: Path) -> None:
    f = tmp_path / "w.yaml"
    f.write_text("name: small\ncalendar:\n  days: 30\n")
    c = load_config(f)
    assert c.name == "small" and c.days == 30 and c.section("rates_per_day")["hires"] == 1.8


def test_round_trip_through_data() -> None:
    c = load_config(days=30)
    assert config_from_data(c.data).world_id == c.world_id


@pytest.mark.parametrize(("kwargs", "fragment"), [
    ({"overrides": ["rates_per_day.nonsense=1"]}, "unknown key"),
    ({"overrides": ["rates_per_day.hires=-1"]}, "rates_per_day.hires"),
    ({"overrides": ["drift.contract_renewal_probability=2"]}, "drift.contract_renewal_probability"),
    ({"overrides": ["nosuch.key=1"]}, "unknown section"),
    ({"overrides": ["hires"]}, "expected section.key=value"),
    ({"name": "Bad Name"}, "name"),
    ({"overrides": ["calendar.start=2024-13-01"]}, "calendar.start"),
])
def test_invalid_configs_name_the_key(kwargs: dict, fragment: str) -> None:
    with pytest.raises(WorldConfigError, match=re.escape(fragment)):
        load_config(**kwargs)


def test_unknown_key_in_file(tmp_path: Path) -> None:
    f = tmp_path / "w.yaml"
    f.write_text("rates_per_day:\n  hirez: 3\n")
    with pytest.raises(WorldConfigError, match=re.escape("rates_per_day.hirez")):
        load_config(f)
