"""The registry of entity classes (`registry.yaml`): source, staged location, freshness tier, TTL; and the measures
(the semantic model) declared over those classes.

One file feeds the router, the refresh planner and the production freshness policies. The loader
refuses a bad file with a message naming the class and the problem.
"""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Annotated, Any

import yaml
from pydantic import BeforeValidator, Field, model_validator

from churn_assets.canonical import canonical_json, sha256_hex
from churn_assets.errors import UserFacingError
from churn_assets.grounding.traces import SOURCE_STORES
from churn_assets.tasks.templates import PLACEHOLDERS
from churn_assets.unique_keys import DuplicateKeyError, load_yaml, not_text
from churn_assets.world.events import ENTITY_CLASSES
from churn_assets.world.validation import StrictModel, fail, none_is, one_of, parse

FRESHNESS_TIERS = ("hot", "warm", "cold", "live")
LIVE = "live"  # the tier read at T: never cached, so it has no TTL and no staged location
REGISTRY_RESOURCE = "registry.yaml"
# A registry file to read instead of the packaged one (a re-tiered deployment, or the regression test's degraded
# registry). The code location's processes and in-process runs inherit it, so every reader sees the same file.
REGISTRY_FILE_ENV = "CHURNBENCH_REGISTRY"
# Tags naming a cached asset's class and tier, on churnbench's staged caches (simulated clock) and, through the
# production adapter (`freshness/adapters.py`), on a data engineer's wall-clock assets: one vocabulary in the UI.
ENTITY_CLASS_TAG = "churnbench/entity_class"
FRESHNESS_TIER_TAG = "churnbench/freshness_tier"
TTL_TAG = "churnbench/ttl_days"


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

    @property
    def is_live(self) -> bool:
        return self.ttl_days is None

    @property
    def staged_location(self) -> str | None:
        return self.staged_table or self.staged_index

    @property
    def tier_tags(self) -> dict[str, str]:
        """The class, tier and TTL as asset tags (a live class has no TTL tag)."""
        tags = {ENTITY_CLASS_TAG: self.name, FRESHNESS_TIER_TAG: self.freshness_tier}
        return tags if self.ttl_days is None else {**tags, TTL_TAG: str(self.ttl_days)}

    @property
    def tier_sentence(self) -> str:
        """One sentence for descriptions: the tier, the TTL and the staleness rule it implies."""
        if self.ttl_days is None:
            return f"Entity class {self.name}, freshness tier live: never cached, read at T."
        k = self.ttl_days
        return (f"Entity class {self.name}, freshness tier {self.freshness_tier}, TTL {k} day(s): refreshed when its "
                f"age exceeds {k} (served age at most {k}, a refresh every {k + 1} days).")


@dataclass(frozen=True)
class MeasureDecl:
    """A registered measure: its name, the classes it reads (the only ones it may request), its arguments (question
    placeholders, typed by their kind), the unit of its value and a one-line meaning."""

    name: str
    reads: tuple[str, ...]
    args: tuple[str, ...]
    unit: str
    meaning: str

    def to_json(self) -> dict[str, Any]:
        return {"reads": list(self.reads), "args": list(self.args), "unit": self.unit, "meaning": self.meaning}


@dataclass(frozen=True)
class Registry:
    classes: dict[str, EntityClass]
    tier_ttls: dict[str, int | None]
    measures: dict[str, MeasureDecl] = field(default_factory=dict)

    @property
    def content_hash(self) -> str:
        """SHA-256 (16 hex digits) of what the registry says: tiers, and per class its tier, TTL, source,
        staged location; and every measure's definition (classes read, arguments, unit, meaning). A scenario's plan
        records it: a re-tiered registry, or a changed measure, is a new plan."""
        data = {"tiers": self.tier_ttls,
                "classes": {c.name: {"tier": c.freshness_tier, "ttl_days": c.ttl_days,
                                     "source": [c.source.store, c.source.relation],
                                     "staged": [c.staged_table, c.staged_index]}
                            for c in self.classes.values()},
                "measures": {m.name: m.to_json() for m in self.measures.values()}}
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

    def measure(self, name: str) -> MeasureDecl:
        try:
            return self.measures[name]
        except KeyError:
            raise RegistryError(f"measure {name!r} is not registered (known: {len(self.measures)} measures; "
                                "`churnbench measures` lists them)") from None

    def measures_reading(self, entity_class: str) -> list[str]:
        """The measures that read `entity_class`, in registry order (a class's "supported measures")."""
        return [m.name for m in self.measures.values() if entity_class in m.reads]

    def with_tiers(self, overrides: dict[str, str]) -> Registry:
        """A copy with some classes moved to another freshness tier (their TTL follows the tier)."""
        classes = dict(self.classes)
        for name, tier in overrides.items():
            c = self[name]
            if tier not in self.tier_ttls:
                raise RegistryError(f"class {name}: unknown freshness tier {tier!r}")
            classes[name] = EntityClass(c.name, tier, self.tier_ttls[tier], c.source, c.staged_table,
                                        c.staged_index)
        return Registry(classes, self.tier_ttls, self.measures)


def load_registry(path: str | Path | None = None) -> Registry:
    """Load and validate the registry: `path`, else the file named by `CHURNBENCH_REGISTRY`, else the packaged
    `registry.yaml`."""
    path = path if path is not None else (os.environ.get(REGISTRY_FILE_ENV) or None)
    if path is None:
        where = f"churn_assets/grounding/{REGISTRY_RESOURCE}"
        text = resources.files("churn_assets.grounding").joinpath(REGISTRY_RESOURCE).read_text()
    else:
        where = str(path)
        try:
            text = Path(path).read_text()
        except FileNotFoundError:
            raise RegistryError(f"registry {where}: file not found") from None
        except UnicodeDecodeError as e:
            raise RegistryError(not_text(f"registry {where}", e)) from None
    return _parsed(text, where)


@functools.lru_cache(maxsize=8)
def _parsed(text: str, where: str) -> Registry:
    """The registry a file's text describes, parsed once per text: a sweep's cells each load it several times
    (planning, the input checks, the served-age checks), and parsing and validating the YAML was about 10% of
    reusing a finished cell. Keyed by the text itself, so an edited file is parsed again."""
    try:
        data = load_yaml(text, f"registry {where}")
    except DuplicateKeyError as e:
        raise RegistryError(str(e)) from None
    except yaml.YAMLError as e:
        raise RegistryError(f"registry {where}: not valid YAML ({e})") from None
    return parse_registry(data, where)


def parse_registry(data: Any, where: str = "registry") -> Registry:
    """The registry that `data` (the parsed YAML) describes; `RegistryError` naming `where` and the class."""
    checked = parse(RegistryFile, data, lambda message: RegistryError(f"registry {where}: {message}"),
                    label=_label)
    tier_ttls = {tier: entry.ttl_days for tier, entry in checked.freshness_tiers.items()}
    classes = {name: _entity_class(name, entry, tier_ttls) for name, entry in checked.entity_classes.items()}
    measures = {name: MeasureDecl(name, tuple(m.reads), tuple(m.args), m.unit, m.meaning)
                for name, m in checked.measures.items()}
    return Registry(classes, tier_ttls, measures)


def _entity_class(name: str, entry: ClassEntry, tier_ttls: dict[str, int | None]) -> EntityClass:
    tier = entry.freshness_tier
    ttl = None if tier == LIVE else (entry.ttl_days if entry.ttl_days is not None else tier_ttls[tier])
    return EntityClass(name, tier, ttl, Source(entry.source.store, entry.source.relation), entry.staged.table,
                       entry.staged.index)


# --- the file's schema --------------------------------------------------------------------------------------

TTL_RULE = "an integer >= 0"
TtlDays = Annotated[int, Field(ge=0, description=TTL_RULE)]
Location = Annotated[str | None, Field(min_length=1, description="a non-empty name")]


class TierEntry(StrictModel):
    ttl_days: Annotated[int | None, Field(ge=0, description=TTL_RULE)] = None  # None: the live tier


class SourceEntry(StrictModel):
    store: Annotated[str, BeforeValidator(one_of(SOURCE_STORES, "source store")), Field(description="a store name")]
    relation: Annotated[str, Field(min_length=1, description="a relation (table, collection, endpoint)")]


class StagedEntry(StrictModel):
    table: Location = None  # <world>_staging.<table>
    index: Location = None  # an index asset (contract_terms -> vector_index)

    @property
    def locations(self) -> list[str]:
        return [loc for loc in (self.table, self.index) if loc is not None]


class ClassEntry(StrictModel):
    freshness_tier: Annotated[str, Field(description="a tier name")]
    # Absent: the tier's TTL. The default is not validated, so an explicit null is refused like any non-integer.
    ttl_days: TtlDays = None  # type: ignore[assignment]
    source: SourceEntry
    staged: Annotated[StagedEntry, BeforeValidator(none_is(dict)), Field(default_factory=StagedEntry)]

    @model_validator(mode="after")
    def _staged_unless_live(self) -> ClassEntry:
        live = self.freshness_tier == LIVE
        if live and self.ttl_days is not None:
            raise fail("a live class is read at T and takes no ttl_days")
        if live and self.staged.locations:
            raise fail("a live class is never staged")
        if not live and not self.staged.locations:
            raise fail("a cached class needs a staged table or index")
        return self


ClassName = Annotated[str, BeforeValidator(one_of(ENTITY_CLASSES, "entity class",
                                                  ": classes can be re-tiered, not renamed"))]
TierName = Annotated[str, BeforeValidator(one_of(FRESHNESS_TIERS, "freshness tier"))]
ArgName = Annotated[str, BeforeValidator(one_of(tuple(PLACEHOLDERS), "measure argument",
                                                ": arguments are question placeholders"))]
MeasureName = Annotated[str, Field(pattern=r"^[a-z][a-z0-9_]*$", description="a snake_case name")]


class MeasureEntry(StrictModel):
    reads: Annotated[list[ClassName], Field(min_length=1, description="a non-empty list of entity classes")]
    args: Annotated[list[ArgName], BeforeValidator(none_is(list)),
                    Field(default_factory=list, description="a list of placeholder names")]
    unit: Annotated[str, Field(min_length=1, description="a unit word")]
    meaning: Annotated[str, Field(min_length=1, description="one line")]

    @model_validator(mode="after")
    def _distinct(self) -> MeasureEntry:
        for what, names in (("reads", self.reads), ("args", self.args)):
            if len(set(names)) != len(names):
                raise fail(f"{what} names a value twice")
        return self


class RegistryFile(StrictModel):
    freshness_tiers: Annotated[dict[TierName, Annotated[TierEntry, BeforeValidator(none_is(dict))]],
                               BeforeValidator(none_is(dict)), Field(default_factory=dict)]
    entity_classes: Annotated[dict[ClassName, ClassEntry],
                              Field(description="a mapping of class name to its entry")]
    measures: Annotated[dict[MeasureName, MeasureEntry], BeforeValidator(none_is(dict)),
                        Field(default_factory=dict, description="a mapping of measure name to its entry")]

    @model_validator(mode="after")
    def _consistent(self) -> RegistryFile:
        """What no single entry can check: tiers' TTLs, declared tiers, one owner per location and measure."""
        for tier, entry in self.freshness_tiers.items():
            if tier == LIVE and entry.ttl_days is not None:
                raise fail("tier live is read at T and takes no ttl_days")
            if tier != LIVE and entry.ttl_days is None:
                raise fail(f"tier {tier}: ttl_days must be {TTL_RULE} (got None)")
        _check_classes(self.entity_classes, tuple(self.freshness_tiers))
        missing = [c for c in ENTITY_CLASSES if c not in self.entity_classes]
        if missing:
            raise fail(f"every entity class needs an entry; missing: {', '.join(missing)}")
        return self


def _check_classes(classes: dict[str, ClassEntry], declared: tuple[str, ...]) -> None:
    """Each class's tier is one the file declares; each staged location has one owner."""
    staged_owner: dict[str, str] = {}
    for name, entry in classes.items():
        if entry.freshness_tier not in declared:
            raise fail(f"class {name}: unknown freshness tier {entry.freshness_tier!r} "
                       f"(known: {', '.join(declared)})")
        for loc in entry.staged.locations:
            if loc in staged_owner:
                raise fail(f"staged location {loc!r} belongs to both {staged_owner[loc]} and {name}")
            staged_owner[loc] = name


def _label(loc: tuple[int | str, ...]) -> tuple[str, tuple[int | str, ...]]:
    """Name the class or tier an error is in ("class prices: ttl_days ..."), as the registry always has."""
    kinds = {"entity_classes": "class", "freshness_tiers": "tier", "measures": "measure"}
    if len(loc) >= 2 and isinstance(loc[0], str) and loc[0] in kinds and "[key]" not in loc:
        return f"{kinds[loc[0]]} {loc[1]}: ", loc[2:]
    return "", loc
