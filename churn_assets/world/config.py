"""World config: one YAML file of defaults, overridable per key; its canonical hash names the world."""

from __future__ import annotations

import datetime as dt
import re
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from churn_assets.canonical import canonical_json, sha256_hex
from churn_assets.errors import UserFacingError
from churn_assets.unique_keys import DuplicateKeyError, load_yaml

if TYPE_CHECKING:  # pydantic is imported on first validation (docs/decisions.md 76)
    from pydantic import BaseModel

DEFAULT_CONFIG_RESOURCE = "default_world.yaml"
# `<name>-s<seed>-<hash6>` (docs/rules.md, "World id"); names follow the world config's name rule. World ids become
# folder names, partition keys and SQL identifiers (`state.validate_world_id` refuses anything else).
WORLD_ID_RE = re.compile(r"^[a-z][a-z0-9_]{0,30}-s\d+-[0-9a-f]{6}$")


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
        section: dict[str, Any] = self.data[key]
        return section

    @property
    def config_hash(self) -> str:
        return sha256_hex(canonical_json(self.data))

    @property
    def world_id(self) -> str:
        """`<name>-s<seed>-<hash6>` (docs/rules.md, "World id")."""
        return f"{self.name}-s{self.seed}-{self.config_hash[:6]}"


def default_config_data() -> dict[str, Any]:
    text = resources.files("churn_assets.world").joinpath(DEFAULT_CONFIG_RESOURCE).read_text()
    data: dict[str, Any] = load_yaml(text, DEFAULT_CONFIG_RESOURCE)
    return data


def load_config(
    path: str | Path | None = None,
    *,
    seed: int | None = None,
    days: int | None = None,
    name: str | None = None,
    overrides: list[str] | None = None,
) -> WorldConfig:
    """Defaults, then the file at `path` (a partial config merged over the defaults), then overrides.

    `overrides` are `section.key=value` strings with YAML values (`rates_per_day.hires=2.5`): each path is
    resolved against the schema, the value set in the data, and the result validated by the schema. A number may
    be written in scientific notation (`1.5e3`, which YAML 1.1 reads as text). A key set twice is refused: the
    second would silently win.
    """
    data = default_config_data()
    if path is not None:
        p = Path(path)
        _merge(data, _read_file(p))
        # Checked before the overrides apply, so that a mistake in the file is reported with the file's name.
        validate_config(data, where=f"world config {p}")
    given: dict[str, str] = {}
    for item in overrides or []:
        key, sep, raw = item.partition("=")
        if not sep:
            raise WorldConfigError(f"override {item!r}: expected section.key=value")
        if key.strip() in given:
            raise WorldConfigError(f"override {item!r}: {key.strip()} is set twice (also {given[key.strip()]!r}); "
                                   "the second would silently win")
        given[key.strip()] = item
        try:
            value = _override_value(load_yaml(raw, f"override {item!r}"))
        except DuplicateKeyError as e:
            raise WorldConfigError(str(e)) from None
        except (yaml.YAMLError, ValueError) as e:
            raise WorldConfigError(f"override {item!r}: value is not valid ({' '.join(str(e).split())})") from None
        _set_path(data, key.strip(), value)
    if seed is not None:
        data["seed"] = seed
    if days is not None:
        data["calendar"]["days"] = days
    if name is not None:
        data["name"] = name
    return validate_config(data)


_SCIENTIFIC = re.compile(r"^[-+]?(\d+\.?\d*|\.\d+)[eE][-+]?\d+$")


def _override_value(value: Any) -> Any:
    """A number in scientific notation as a number: YAML 1.1 reads `1.5e3` (no dot or no sign in the exponent)
    as text, and the schema would then refuse it as not a number."""
    if isinstance(value, str) and _SCIENTIFIC.match(value.strip()):
        return float(value)
    return value


def config_from_data(data: dict[str, Any]) -> WorldConfig:
    """A config from a complete mapping (as stored in a manifest or the state folder)."""
    return validate_config(data)


def _read_file(p: Path) -> dict[str, Any]:
    try:
        loaded = load_yaml(p.read_text(), f"world config {p}")
    except DuplicateKeyError as e:
        raise WorldConfigError(str(e)) from None
    except FileNotFoundError:
        raise WorldConfigError(f"world config {p}: file not found") from None
    except (yaml.YAMLError, ValueError) as e:
        raise WorldConfigError(f"world config {p}: not valid YAML ({e})") from None
    if not isinstance(loaded, dict):
        raise WorldConfigError(f"world config {p}: top level must be a mapping")
    return loaded


def _merge(base: dict[str, Any], extra: dict[str, Any]) -> None:
    """`extra` over `base`, section by section; which keys may exist is the schema's to say."""
    for key, value in extra.items():
        if isinstance(base.get(key), dict) and isinstance(value, dict):
            _merge(base[key], value)
        else:
            base[key] = value


def _set_path(data: dict[str, Any], dotted: str, value: Any) -> None:
    """Set the leaf `dotted` names: every part but the last a section of the schema, the last one of its keys.
    `data` holds every section (it starts from the defaults and a merged file has been validated)."""
    from churn_assets.world.config_model import WorldModel
    from churn_assets.world.validation import section_model

    model: type[BaseModel] = WorldModel
    node = data
    parts = dotted.split(".")
    for part in parts[:-1]:
        section = section_model(model, part)
        if section is None:
            raise WorldConfigError(f"override {dotted!r}: unknown section {part!r}")
        model, node = section, node[part]
    if parts[-1] not in model.model_fields or section_model(model, parts[-1]) is not None:
        raise WorldConfigError(f"override {dotted!r}: unknown key")
    node[parts[-1]] = value


def validate_config(data: dict[str, Any], where: str = "world config") -> WorldConfig:
    """`data` checked by the schema (`config_model.WorldModel`); errors name `where` and the key.

    The config's data is the schema's values in `data`'s own key order, so it is the mapping the hash has
    always been computed from (integers given for float fields become floats, days stay text; see
    `config_model`) and it is stored in the order it came in. `data` itself is not changed.
    """
    # Imported here: the CLI imports this module at start-up, and pydantic with its first model costs
    # 150-250 ms (docs/decisions.md 76); only a command that reads a config pays it.
    from churn_assets.world.config_model import WorldModel
    from churn_assets.world.validation import parse

    model = parse(WorldModel, data, lambda message: WorldConfigError(f"{where}: {message}"))
    return WorldConfig(_in_order_of(data, model.model_dump()))


def _in_order_of(given: Any, validated: Any) -> Any:
    """`validated`'s values with `given`'s key order (every key of the schema is required: same keys)."""
    if isinstance(given, dict) and isinstance(validated, dict):
        return {key: _in_order_of(given[key], validated[key]) for key in given}
    return validated
