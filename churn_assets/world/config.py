"""World config: one YAML file of defaults, overridable per key; its canonical hash names the world."""

from __future__ import annotations

import copy
import datetime as dt
import re
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from churn_assets.canonical import canonical_json, sha256_hex
from churn_assets.errors import UserFacingError

DEFAULT_CONFIG_RESOURCE = "default_world.yaml"


class WorldConfigError(UserFacingError, ValueError):
    """A world config file or override is invalid; the message names the key."""


@dataclass(frozen=True)
class WorldConfig:
    """A validated world config. `data` is the full nested mapping (what is hashed)."""

    data: dict[str, Any]

    @property
    def name(self) -> str:
        return str(self.data["name"])

    @property
    def seed(self) -> int:
        return int(self.data["seed"])

    @property
    def start(self) -> dt.date:
        return dt.date.fromisoformat(str(self.data["calendar"]["start"]))

    @property
    def days(self) -> int:
        return int(self.data["calendar"]["days"])

    @property
    def end(self) -> dt.date:
        """Last simulated day (inclusive)."""
        return self.start + dt.timedelta(days=self.days - 1)

    def section(self, key: str) -> dict[str, Any]:
        return self.data[key]

    @property
    def config_hash(self) -> str:
        return sha256_hex(canonical_json(self.data))

    @property
    def world_id(self) -> str:
        """`<name>-s<seed>-<hash6>` (ARCHITECTURE.md section 10, "World id")."""
        return f"{self.name}-s{self.seed}-{self.config_hash[:6]}"


def default_config_data() -> dict[str, Any]:
    text = resources.files("churn_assets.world").joinpath(DEFAULT_CONFIG_RESOURCE).read_text()
    return yaml.safe_load(text)


def load_config(
    path: str | Path | None = None,
    *,
    seed: int | None = None,
    days: int | None = None,
    name: str | None = None,
    overrides: list[str] | None = None,
) -> WorldConfig:
    """Defaults, then the file at `path` (a partial config merged over the defaults), then overrides.

    `overrides` are `section.key=value` strings with YAML values (`rates_per_day.hires=2.5`).
    """
    data = default_config_data()
    if path is not None:
        p = Path(path)
        try:
            loaded = yaml.safe_load(p.read_text())
        except FileNotFoundError:
            raise WorldConfigError(f"world config {p}: file not found") from None
        except (yaml.YAMLError, ValueError) as e:
            raise WorldConfigError(f"world config {p}: not valid YAML ({e})") from None
        if not isinstance(loaded, dict):
            raise WorldConfigError(f"world config {p}: top level must be a mapping")
        _merge(data, loaded, where=str(p))
    for item in overrides or []:
        key, sep, raw = item.partition("=")
        if not sep:
            raise WorldConfigError(f"override {item!r}: expected section.key=value")
        try:
            value = yaml.safe_load(raw)
        except (yaml.YAMLError, ValueError) as e:
            raise WorldConfigError(f"override {item!r}: value is not valid ({e})") from None
        _set_path(data, key.strip(), value)
    if seed is not None:
        data["seed"] = seed
    if days is not None:
        data["calendar"]["days"] = days
    if name is not None:
        data["name"] = name
    return validate_config(data)


def config_from_data(data: dict[str, Any]) -> WorldConfig:
    """A config from a complete mapping (as stored in a manifest or the state folder)."""
    return validate_config(copy.deepcopy(data))


def _merge(base: dict[str, Any], extra: dict[str, Any], where: str, prefix: str = "") -> None:
    for key, value in extra.items():
        dotted = f"{prefix}{key}"
        if key not in base:
            raise WorldConfigError(f"world config {where}: unknown key {dotted!r}")
        if isinstance(base[key], dict):
            if not isinstance(value, dict):
                raise WorldConfigError(f"world config {where}: {dotted!r} must be a mapping")
            _merge(base[key], value, where, prefix=f"{dotted}.")
        else:
            base[key] = value


def _set_path(data: dict[str, Any], dotted: str, value: Any) -> None:
    node = data
    parts = dotted.split(".")
    for part in parts[:-1]:
        if not isinstance(node.get(part), dict):
            raise WorldConfigError(f"override {dotted!r}: unknown section {part!r}")
        node = node[part]
    if parts[-1] not in node or isinstance(node[parts[-1]], dict):
        raise WorldConfigError(f"override {dotted!r}: unknown key")
    node[parts[-1]] = value


_NAME_RE = re.compile(r"^[a-z][a-z0-9_]{0,30}$")


def validate_config(data: dict[str, Any]) -> WorldConfig:
    """Check types and ranges; normalise numbers so equal configs hash equally."""
    def need(cond: bool, key: str, what: str) -> None:
        if not cond:
            raise WorldConfigError(f"world config: {key} {what}")

    need(isinstance(data.get("name"), str) and bool(_NAME_RE.match(data["name"])), "name",
         "must be lower-case letters, digits or _ (max 31), starting with a letter")
    need(isinstance(data.get("seed"), int) and data["seed"] >= 0, "seed", "must be a non-negative integer")
    cal = data["calendar"]
    try:
        dt.date.fromisoformat(str(cal["start"]))
    except ValueError:
        raise WorldConfigError("world config: calendar.start must be an ISO day YYYY-MM-DD") from None
    cal["start"] = str(cal["start"])
    need(isinstance(cal.get("days"), int) and 1 <= cal["days"] <= 3650, "calendar.days", "must be 1..3650")

    for section in ("reference_data", "rates_per_day", "consumption", "drift", "activity_weight"):
        need(isinstance(data.get(section), dict), section, "must be a mapping")
    for key, value in data["rates_per_day"].items():
        need(isinstance(value, int | float) and value >= 0, f"rates_per_day.{key}", "must be a number >= 0")
        data["rates_per_day"][key] = float(value)
    ref = data["reference_data"]
    for key in ("vendors", "business_units", "cost_centers", "products", "users", "initial_licenses",
                "contracts"):
        need(isinstance(ref.get(key), int) and ref[key] >= 1, f"reference_data.{key}",
             "must be an integer >= 1")
    need(ref["initial_licenses"] <= ref["users"], "reference_data.initial_licenses", "must be <= users")
    need(ref["contracts"] >= ref["vendors"], "reference_data.contracts",
         "must be >= vendors (every vendor starts with a contract)")
    lo, hi = ref["list_price_usd"]
    need(0 < lo <= hi, "reference_data.list_price_usd", "must be [low, high] with 0 < low <= high")
    ref["list_price_usd"] = [float(lo), float(hi)]
    need(0 <= ref["api_product_share"] <= 1, "reference_data.api_product_share", "must be in [0, 1]")
    for key in ("freed_seat_reassign_probability", "new_hire_license_probability",
                "contract_renewal_probability", "ticket_start_probability", "ticket_resolve_probability",
                "vendor_rename_share", "shelfware_share", "shelfware_usage"):
        value = data["drift"].get(key)
        need(isinstance(value, int | float) and 0 <= value <= 1, f"drift.{key}", "must be in [0, 1]")
        data["drift"][key] = float(value)
    aw = data["activity_weight"]
    need(aw.get("distribution") == "pareto", "activity_weight.distribution", "must be 'pareto'")
    need(isinstance(aw.get("alpha"), int | float) and aw["alpha"] > 0, "activity_weight.alpha", "must be > 0")
    aw["alpha"] = float(aw["alpha"])
    aw["max"] = float(aw["max"])
    cons = data["consumption"]
    need(isinstance(cons.get("events_per_day"), int) and cons["events_per_day"] >= 0,
         "consumption.events_per_day", "must be an integer >= 0")
    return WorldConfig(data)
