"""World config: defaults, overrides, validation and world ids."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from churn_assets.world.config import WorldConfigError, config_from_data, default_config_data, load_config
from churn_assets.world.config_model import WorldModel
from churn_assets.world.validation import leaf_fields


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


# --- typed config: world ids and the hashed data are what they were before the schema --------------------------

# World ids computed by the hand-written validation this schema replaced: each case exercises one way the data
# is normalised before hashing (an int for a float field, a YAML date, a compact ISO day, kept int/float types).
PINNED_WORLD_IDS = [
    ({}, "default-s42-2906f8"),
    ({"days": 30}, "default-s42-1baecb"),
    ({"seed": 7, "name": "small"}, "small-s7-f2989a"),
    ({"overrides": ["rates_per_day.hires=2"]}, "default-s42-c6826d"),
    ({"overrides": ["reference_data.list_price_usd=[20, 500]"]}, "default-s42-2906f8"),
    ({"overrides": ["drift.shelfware_share=0", "drift.contract_renewal_probability=1"]}, "default-s42-74b595"),
    ({"overrides": ["activity_weight.alpha=1", "activity_weight.max=50"]}, "default-s42-c54548"),
    ({"overrides": ["reference_data.api_product_share=1"]}, "default-s42-d07096"),
    ({"overrides": ["drift.price_change_range=[0, 1]", "drift.renewal_value_change=[0, 1]"]}, "default-s42-aad789"),
    ({"overrides": ["consumption.api_calls_mean=250.0"]}, "default-s42-d98324"),
    ({"overrides": ["calendar.start=2024-02-01"]}, "default-s42-232069"),
    ({"overrides": ["calendar.start='20240201'"]}, "default-s42-d9172d"),
    ({"overrides": ["reference_data.contract_terms_months=[12, 24]", "consumption.session_minutes=[1, 60]"]},
     "default-s42-51d6ef"),
]


@pytest.mark.parametrize(("kwargs", "world_id"), PINNED_WORLD_IDS)
def test_world_ids_are_unchanged(kwargs: dict, world_id: str) -> None:
    config = load_config(**kwargs)
    assert config.world_id == world_id
    assert config_from_data(config.data).world_id == world_id


def test_default_config_hash_is_pinned() -> None:
    assert load_config().config_hash == "2906f84a9a44785a4b1e7bd126520ee3f64f3fdf1e94eed7285c18dba7b3f169"


def test_data_is_the_plain_mapping_in_the_order_given() -> None:
    data = load_config(overrides=["rates_per_day.hires=2", "reference_data.api_product_share=1",
                                  "drift.price_change_range=[0, 1]", "calendar.start=2024-02-01"]).data
    assert type(data) is dict and type(data["drift"]) is dict
    hires, share, change = data["rates_per_day"]["hires"], data["reference_data"]["api_product_share"], \
        data["drift"]["price_change_range"]
    assert (hires, type(hires)) == (2.0, float)  # a float field: 2 and 2.0 are one world
    assert (share, type(share)) == (1, int)  # a number field keeps what it was given
    assert change == [0, 1] and [type(v) for v in change] == [int, int] and type(change) is list
    assert data["calendar"]["start"] == "2024-02-01"  # an unquoted YAML date is stored as its text
    assert data["reference_data"]["list_price_usd"] == [20.0, 500.0]
    defaults = default_config_data()
    assert list(data) == list(defaults)
    assert all(list(data[k]) == list(defaults[k]) for k in defaults if isinstance(defaults[k], dict))


def test_stored_data_keeps_its_order_and_is_not_changed() -> None:
    stored = json.loads(json.dumps(load_config(days=30).data, sort_keys=True))
    before = json.dumps(stored)
    config = config_from_data(stored)
    assert json.dumps(config.data) == before and json.dumps(stored) == before
    assert config.world_id == "default-s42-1baecb"


# --- typed config: bad input is one clear line -------------------------------------------------------------------


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"overrides": ["rates_per_day.hires=-1"]}, "world config: rates_per_day.hires must be a number >= 0 (got -1)"),
    ({"overrides": ["seed=true"]}, "world config: seed must be a non-negative integer (got True)"),
    ({"overrides": ["consumption.events_per_day=2.5"]},
     "world config: consumption.events_per_day must be an integer >= 0 (got 2.5)"),
    ({"overrides": ["rates_per_day.hires='2.5'"]}, "world config: rates_per_day.hires must be a number >= 0"),
    ({"overrides": ["reference_data.initial_licenses=401"]},
     "world config: reference_data.initial_licenses must be <= users (got 401)"),
    ({"overrides": ["reference_data.list_price_usd=[500, 20]"]},
     "world config: reference_data.list_price_usd must be [low, high] with 0 < low <= high"),
    ({"overrides": ["reference_data.list_price_usd=[1, 2, 3]"]}, "reference_data.list_price_usd must be [low, high]"),
    ({"overrides": ["reference_data.contract_terms_months=[12, 0]"]},
     "reference_data.contract_terms_months must be a non-empty list of whole months >= 1"),
    ({"overrides": ["activity_weight.distribution=normal"]}, "activity_weight.distribution must be 'pareto'"),
    ({"overrides": ["calendar.start=hello"]}, "world config: calendar.start must be an ISO day YYYY-MM-DD"),
    ({"days": 0}, "world config: calendar.days must be 1..3650 (got 0)"),
    ({"overrides": ["calendar=5"]}, "override 'calendar': unknown key"),
    ({"overrides": ["calendar.start.day=1"]}, "override 'calendar.start.day': unknown section 'start'"),
    ({"overrides": ["seed=-1", "rates_per_day.hires=-1"]}, "(and 1 more problem)"),
])
def test_bad_values_are_one_clear_line(kwargs: dict, message: str) -> None:
    with pytest.raises(WorldConfigError) as err:
        load_config(**kwargs)
    assert message in str(err.value) and "\n" not in str(err.value)


@pytest.mark.parametrize(("text", "message"), [
    ("rates_per_day: 5\n", "rates_per_day must be a mapping"),
    ("hires: 3\n", "unknown key 'hires'"),
    ("calendar:\n  days: 0\n", "calendar.days must be 1..3650"),
    ("- a\n", "top level must be a mapping"),
])
def test_a_bad_file_is_named(tmp_path: Path, text: str, message: str) -> None:
    f = tmp_path / "w.yaml"
    f.write_text(text)
    with pytest.raises(WorldConfigError, match=re.escape(f"world config {f}: {message}")):
        load_config(f, overrides=["seed=1"])


def test_an_override_can_fix_nothing_in_a_bad_file(tmp_path: Path) -> None:
    """The file is checked on its own: a later override does not hide its mistake."""
    f = tmp_path / "w.yaml"
    f.write_text("rates_per_day:\n  hires: -1\n")
    with pytest.raises(WorldConfigError, match=re.escape(f"world config {f}: rates_per_day.hires")):
        load_config(f, overrides=["rates_per_day.hires=1"])


def test_the_schema_has_exactly_the_default_keys_and_says_what_each_must_be() -> None:
    leaves = leaf_fields(WorldModel)

    def paths(node: dict, prefix: str = "") -> set[str]:
        return {p for k, v in node.items()
                for p in (paths(v, f"{prefix}{k}.") if isinstance(v, dict) else {f"{prefix}{k}"})}

    assert set(leaves) == paths(default_config_data())
    assert not [path for path, field in leaves.items() if not field.description]
