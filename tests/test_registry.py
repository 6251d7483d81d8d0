"""The registry loader: the packaged file is valid, and bad files are refused with a clear message."""

from __future__ import annotations

import copy
import re
from pathlib import Path

import pytest
import yaml

from churn_assets.grounding.registry import RegistryError, RegistryFile, load_registry, parse_registry
from churn_assets.grounding.traces import SOURCE_STORES
from churn_assets.world.events import ENTITY_CLASSES
from churn_assets.world.validation import leaf_fields


def test_packaged_registry_has_every_class_with_its_fixed_tiers() -> None:
    reg = load_registry()
    assert list(reg.classes) == list(ENTITY_CLASSES)
    tiers = {name: (c.freshness_tier, c.ttl_days) for name, c in reg.classes.items()}
    assert tiers == {
        "assignments": ("hot", 1), "user_status": ("hot", 1),
        "prices": ("warm", 7), "cost_center_membership": ("warm", 7),
        "contract_terms": ("cold", 30), "vendor_dims": ("cold", 30),
        "consumption": ("live", None), "utilization": ("live", None), "tickets": ("live", None),
    }
    assert reg["contract_terms"].staged_index == "vector_index"
    assert [c.name for c in reg.staged_classes] == [
        "assignments", "user_status", "prices", "cost_center_membership", "contract_terms", "vendor_dims"]


def _raw() -> dict:
    text = (Path(__file__).resolve().parents[1] / "churn_assets/grounding/registry.yaml").read_text()
    return yaml.safe_load(text)


@pytest.mark.parametrize(("mutate", "fragment"), [
    (lambda d: d["entity_classes"]["prices"].update(freshness_tier="tepid"), "unknown freshness tier 'tepid'"),
    (lambda d: d["entity_classes"]["prices"].update(ttl_days=-2), "ttl_days must be an integer >= 0"),
    (lambda d: d["freshness_tiers"]["warm"].update(ttl_days=-1), "tier warm: ttl_days"),
    (lambda d: d["measures"]["list_price"].update(reads=["price_history"]), "unknown entity class 'price_history'"),
    (lambda d: d["measures"]["list_price"].update(args=["sku"]), "unknown measure argument 'sku'"),
    (lambda d: d["entity_classes"]["prices"].update(staged={"table": "assignments"}), "belongs to both"),
    (lambda d: d["entity_classes"]["prices"]["source"].update(store="ftp"), "unknown source store 'ftp'"),
    (lambda d: d["entity_classes"].update(price_history=d["entity_classes"]["prices"]), "unknown entity class"),
    (lambda d: d["entity_classes"].pop("tickets"), "missing: tickets"),
    (lambda d: d["entity_classes"]["tickets"].update(staged={"table": "tickets"}), "never staged"),
    (lambda d: d["entity_classes"]["prices"].pop("staged"), "needs a staged table or index"),
])
def test_bad_registry_is_refused(mutate, fragment: str) -> None:
    data = copy.deepcopy(_raw())
    mutate(data)
    with pytest.raises(RegistryError) as err:
        parse_registry(data, "test.yaml")
    assert fragment in str(err.value) and "test.yaml" in str(err.value)


def test_retiering_keeps_names() -> None:
    reg = load_registry().with_tiers({"vendor_dims": "warm"})
    assert reg["vendor_dims"].freshness_tier == "warm" and reg["vendor_dims"].ttl_days == 7
    with pytest.raises(RegistryError, match="unknown entity class"):
        reg["vendors"]


# --- typed config --------------------------------------------------------------------------------------------


def test_content_hash_is_pinned() -> None:
    """The packaged file's meaning, pinned: a re-tiered class or a changed measure definition is a new plan, so a
    change here must be deliberate (it was 1a66da42f0aae323 before measures were declared with their reads and
    arguments, docs/decisions.md 312)."""
    assert load_registry().content_hash == "4a5e14b2b6516caa"


def test_a_changed_measure_definition_changes_the_hash() -> None:
    data = copy.deepcopy(_raw())
    data["measures"]["list_price"]["reads"] = ["prices", "assignments"]
    assert parse_registry(data).content_hash != load_registry().content_hash


@pytest.mark.parametrize(("mutate", "message"), [
    (lambda d: d["entity_classes"]["prices"].update(ttl_day=3), "class prices: unknown key 'ttl_day'"),
    (lambda d: d["entity_classes"]["prices"].update(ttl_days=None), "class prices: ttl_days must be an integer >= 0"),
    (lambda d: d["entity_classes"]["prices"].update(ttl_days=True), "class prices: ttl_days must be an integer >= 0"),
    (lambda d: d["entity_classes"]["consumption"].update(ttl_days=3), "class consumption: a live class is read at T"),
    (lambda d: d["entity_classes"]["prices"].update(staged={"table": ""}), "class prices: staged.table must be"),
    (lambda d: d["entity_classes"]["prices"]["source"].update(relation=""), "class prices: source.relation must be"),
    (lambda d: d["entity_classes"]["prices"].pop("source"), "class prices: source is missing"),
    (lambda d: d["entity_classes"].update(prices=5), "class prices: must be a mapping"),
    (lambda d: d["entity_classes"]["prices"].update(measures=["list_price"]), "class prices: unknown key 'measures'"),
    (lambda d: d["measures"]["list_price"].update(reads=[]), "measure list_price: reads"),
    (lambda d: d["measures"]["list_price"].update(args="product"), "measure list_price: args must be"),
    (lambda d: d["measures"]["list_price"].pop("meaning"), "measure list_price: meaning is missing"),
    (lambda d: d["freshness_tiers"].update(tepid={"ttl_days": 3}), "unknown freshness tier 'tepid'"),
    (lambda d: d["freshness_tiers"]["live"].update(ttl_days=3), "tier live is read at T and takes no ttl_days"),
    (lambda d: d["freshness_tiers"]["warm"].update(ttl_days=None), "tier warm: ttl_days must be an integer >= 0"),
    (lambda d: d.pop("entity_classes"), "entity_classes is missing"),
    (lambda d: d.update(entity_classes=["prices"]), "entity_classes must be a mapping"),
])
def test_bad_entries_are_one_line_naming_the_file_and_the_class(mutate, message: str) -> None:
    data = copy.deepcopy(_raw())
    mutate(data)
    with pytest.raises(RegistryError) as err:
        parse_registry(data, "test.yaml")
    assert str(err.value).startswith("registry test.yaml: ") and message in str(err.value), str(err.value)
    assert "\n" not in str(err.value)


def test_empty_values_mean_none() -> None:
    """YAML's empty value for a list, a staged mapping or a tier is the empty one, as before the schema."""
    data = copy.deepcopy(_raw())
    data["measures"]["unassigned_licenses"]["args"] = None
    data["entity_classes"]["tickets"]["staged"] = None
    data["freshness_tiers"]["live"] = None
    reg = parse_registry(data, "test.yaml")
    assert reg.measures["unassigned_licenses"].args == () and reg["tickets"].staged_location is None
    assert reg.tier_ttls["live"] is None and reg.content_hash == load_registry().content_hash


def test_source_stores_and_classes_come_from_their_owners() -> None:
    """The schema keeps no copy of the stores (traces.SOURCE_STORES) or the class names (events.ENTITY_CLASSES)."""
    for store in SOURCE_STORES:
        data = copy.deepcopy(_raw())
        data["entity_classes"]["prices"]["source"]["store"] = store
        assert parse_registry(data)["prices"].source.store == store
    data = copy.deepcopy(_raw())
    data["entity_classes"]["prices"]["source"]["store"] = "ftp"
    with pytest.raises(RegistryError, match=re.escape(f"(known: {', '.join(SOURCE_STORES)})")):
        parse_registry(data)
    data = copy.deepcopy(_raw())
    data["entity_classes"]["vendors"] = data["entity_classes"].pop("vendor_dims")
    with pytest.raises(RegistryError, match=re.escape(f"(known: {', '.join(ENTITY_CLASSES)})")):
        parse_registry(data)


def test_every_field_says_what_it_must_be() -> None:
    leaves = leaf_fields(RegistryFile)
    assert "entity_classes.source.store" in leaves and "freshness_tiers.ttl_days" in leaves
    assert not [path for path, field in leaves.items() if not field.description]
