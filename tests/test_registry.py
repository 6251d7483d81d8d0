"""The registry loader: the packaged file is valid, and bad files are refused with a clear message."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import yaml

from churn_assets.grounding.registry import RegistryError, load_registry, parse_registry
from churn_assets.world.events import ENTITY_CLASSES


def test_packaged_registry_has_every_class_with_section_10_tiers() -> None:
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
    (lambda d: (d["entity_classes"]["prices"].update(measures=["spend"]),
                d["entity_classes"]["assignments"].update(measures=["spend"])),
     "measure 'spend' is registered on both"),
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
