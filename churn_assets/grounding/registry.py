"""The registry of entity classes (`registry.yaml`): source, staged location, freshness tier, TTL, measures.

One file feeds the router, the refresh planner and the production freshness policies. The loader
refuses a bad file with a message naming the class and the problem.
"""

from __future__ import annotations

from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from churn_assets.canonical import canonical_json, sha256_hex
from churn_assets.errors import UserFacingError
from churn_assets.grounding.traces import SOURCE_STORES
from churn_assets.world.events import ENTITY_CLASSES

FRESHNESS_TIERS = ("hot", "warm", "cold", "live")
REGISTRY_RESOURCE = "registry.yaml"


class RegistryError(UserFacingError, ValueError):
    """The registry file is invalid; the message names the file, the class and the problem."""


@dataclass(frozen=True)
class Source:
    store: str  # warehouse | operational | saas | documents
    relation: str  # dbt model, collection, endpoint or document set


@dataclass(frozen=True)
class EntityClass:
    name: str
    freshness_tier: str
    ttl_days: int | None  # None: live (never cached, read at T)
    source: Source
    staged_table: str | None  # <world>_staging.<table>
    staged_index: str | None  # an index asset (contract_terms -> vector_index)
    measures: tuple[str, ...]

    @property
    def is_live(self) -> bool:
        return self.ttl_days is None

    @property
    def staged_location(self) -> str | None:
        return self.staged_table or self.staged_index


@dataclass(frozen=True)
class Registry:
    classes: dict[str, EntityClass]
    tier_ttls: dict[str, int | None]

    @property
    def content_hash(self) -> str:
        """SHA-256 (16 hex digits) of what the registry says: tiers, and per class its tier, TTL, source,
        staged location and measures. A scenario's plan records it: a re-tiered registry is a new plan."""
        data = {"tiers": self.tier_ttls,
                "classes": {c.name: {"tier": c.freshness_tier, "ttl_days": c.ttl_days,
                                     "source": [c.source.store, c.source.relation],
                                     "staged": [c.staged_table, c.staged_index], "measures": list(c.measures)}
                            for c in self.classes.values()}}
        return sha256_hex(canonical_json(data))[:16]

    def __getitem__(self, name: str) -> EntityClass:
        try:
            return self.classes[name]
        except KeyError:
            raise RegistryError(f"unknown entity class {name!r}; known: {', '.join(self.classes)}") from None

    @property
    def staged_classes(self) -> list[EntityClass]:
        """Classes cached by refreshes (every class that is not live), in registry order."""
        return [c for c in self.classes.values() if not c.is_live]

    @property
    def live_classes(self) -> list[EntityClass]:
        return [c for c in self.classes.values() if c.is_live]

    def class_of_measure(self, measure: str) -> EntityClass:
        for c in self.classes.values():
            if measure in c.measures:
                return c
        raise RegistryError(f"measure {measure!r} is not registered on any entity class")

    def with_tiers(self, overrides: dict[str, str]) -> Registry:
        """A copy with some classes moved to another freshness tier (their TTL follows the tier)."""
        classes = dict(self.classes)
        for name, tier in overrides.items():
            c = self[name]
            if tier not in self.tier_ttls:
                raise RegistryError(f"class {name}: unknown freshness tier {tier!r}")
            classes[name] = EntityClass(c.name, tier, self.tier_ttls[tier], c.source, c.staged_table,
                                        c.staged_index, c.measures)
        return Registry(classes, self.tier_ttls)


def load_registry(path: str | Path | None = None) -> Registry:
    """Load and validate the registry (the packaged `registry.yaml` by default)."""
    if path is None:
        where = f"churn_assets/grounding/{REGISTRY_RESOURCE}"
        text = resources.files("churn_assets.grounding").joinpath(REGISTRY_RESOURCE).read_text()
    else:
        where = str(path)
        try:
            text = Path(path).read_text()
        except FileNotFoundError:
            raise RegistryError(f"registry {where}: file not found") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as e:
        raise RegistryError(f"registry {where}: not valid YAML ({e})") from None
    return parse_registry(data, where)


def parse_registry(data: Any, where: str = "registry") -> Registry:
    def fail(msg: str) -> RegistryError:
        return RegistryError(f"registry {where}: {msg}")

    if not isinstance(data, dict) or not isinstance(data.get("entity_classes"), dict):
        raise fail("needs a mapping 'entity_classes'")
    tiers_raw = data.get("freshness_tiers") or {}
    tier_ttls: dict[str, int | None] = {}
    for tier, spec in tiers_raw.items():
        if tier not in FRESHNESS_TIERS:
            raise fail(f"unknown freshness tier {tier!r} (known: {', '.join(FRESHNESS_TIERS)})")
        ttl = (spec or {}).get("ttl_days")
        if tier == "live":
            if ttl is not None:
                raise fail("tier live is read at T and takes no ttl_days")
        elif not isinstance(ttl, int) or isinstance(ttl, bool) or ttl < 0:
            raise fail(f"tier {tier}: ttl_days must be an integer >= 0 (got {ttl!r})")
        tier_ttls[tier] = ttl

    classes: dict[str, EntityClass] = {}
    measure_owner: dict[str, str] = {}
    staged_owner: dict[str, str] = {}
    for name, spec in data["entity_classes"].items():
        if name not in ENTITY_CLASSES:
            raise fail(f"unknown entity class {name!r}: classes can be re-tiered, not renamed "
                       f"(known: {', '.join(ENTITY_CLASSES)})")
        if not isinstance(spec, dict):
            raise fail(f"class {name}: must be a mapping")
        tier = spec.get("freshness_tier")
        if tier not in tier_ttls:
            raise fail(f"class {name}: unknown freshness tier {tier!r} (known: {', '.join(tier_ttls)})")
        ttl = spec.get("ttl_days", tier_ttls[tier])
        if tier == "live":
            ttl = None
        elif not isinstance(ttl, int) or isinstance(ttl, bool) or ttl < 0:
            raise fail(f"class {name}: ttl_days must be an integer >= 0 (got {ttl!r})")
        src = spec.get("source") or {}
        if src.get("store") not in SOURCE_STORES:
            raise fail(f"class {name}: unknown source store {src.get('store')!r} "
                       f"(known: {', '.join(SOURCE_STORES)})")
        if not isinstance(src.get("relation"), str) or not src["relation"]:
            raise fail(f"class {name}: source needs a relation (table, collection, endpoint)")
        staged = spec.get("staged") or {}
        table, index = staged.get("table"), staged.get("index")
        if tier == "live" and (table or index):
            raise fail(f"class {name}: a live class is never staged")
        if tier != "live" and not (table or index):
            raise fail(f"class {name}: a cached class needs a staged table or index")
        for loc in (table, index):
            if loc:
                if loc in staged_owner:
                    raise fail(f"staged location {loc!r} belongs to both {staged_owner[loc]} and {name}")
                staged_owner[loc] = name
        measures = spec.get("measures") or []
        if not isinstance(measures, list) or not all(isinstance(m, str) for m in measures):
            raise fail(f"class {name}: measures must be a list of names")
        for m in measures:
            if m in measure_owner:
                raise fail(f"measure {m!r} is registered on both {measure_owner[m]} and {name}")
            measure_owner[m] = name
        classes[name] = EntityClass(name, tier, ttl, Source(src["store"], src["relation"]), table, index,
                                    tuple(measures))
    missing = [c for c in ENTITY_CLASSES if c not in classes]
    if missing:
        raise fail(f"every entity class needs an entry; missing: {', '.join(missing)}")
    return Registry(classes, tier_ttls)
