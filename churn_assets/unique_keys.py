"""YAML and JSON readers that refuse a key given twice in one mapping (no silent "last one wins").

PyYAML's `safe_load` and `json.loads` keep the last of two equal keys and say nothing: a registry with
`freshness_tier` twice, a world config with `hires` twice, a hand-edited baseline with a cell twice all load as if
the first were never written. Every config and stored file churnbench reads (world configs and `--set` values,
the registry, `deployment.yaml`, `prices.yaml`, the SaaS keys file, the regression baseline, stored scenario and
sweep JSON) goes through these instead; each refusal is one `DuplicateKeyError` line naming the file (or what was
read), the line and the key. dbt's own YAML is dbt's to read. A source scan
(tests/test_unique_keys.py) names every other parse in the package and why it may skip these.
"""

from __future__ import annotations

import json
from typing import Any

import yaml

from churn_assets.errors import UserFacingError


class DuplicateKeyError(UserFacingError, ValueError):
    """A mapping with a key given twice."""


class _UniqueKeyLoader(yaml.SafeLoader):
    """`yaml.SafeLoader` refusing a mapping with a key given twice (merge keys `<<` are YAML's own overriding)."""

    where = "YAML"  # what is read, for the error (set per load)


def _construct_mapping(loader: _UniqueKeyLoader, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
    seen: dict[Any, yaml.Node] = {}
    for key_node, _value in node.value:
        if key_node.tag == "tag:yaml.org,2002:merge":
            continue
        key = loader.construct_object(key_node, deep=True)
        try:
            first = seen.get(key)
        except TypeError:  # an unhashable key: SafeLoader's own error says so below
            continue
        if first is not None:
            raise DuplicateKeyError(f"{loader.where}, line {key_node.start_mark.line + 1}: key {key!r} is given twice "
                                    f"in one mapping (first on line {first.start_mark.line + 1}); the second would "
                                    "silently replace the first")
        seen[key] = key_node
    return yaml.SafeLoader.construct_mapping(loader, node, deep=deep)


_UniqueKeyLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)


def load_yaml(text: str, where: str) -> Any:
    """`yaml.safe_load(text)`, refusing duplicate keys; `where` names the file or value in the error.
    Raises `DuplicateKeyError` or `yaml.YAMLError` (the caller says what kind of file it is)."""
    loader = _UniqueKeyLoader(text)
    loader.where = where
    try:
        return loader.get_single_data()
    finally:
        loader.dispose()


def not_text(where: str, error: UnicodeDecodeError) -> str:
    """The one-line reason a file that should be text is not: where, the byte and its offset."""
    return f"{where}: not UTF-8 text (byte 0x{error.object[error.start]:02x} at offset {error.start})"


def load_json(text: str | bytes, where: str) -> Any:
    """`json.loads(text)`, refusing an object with a key given twice; `where` names the file in the error.
    Raises `DuplicateKeyError` or `json.JSONDecodeError`."""
    def unique(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for key, value in pairs:
            if key in out:
                raise DuplicateKeyError(f"{where}: key {key!r} is given twice in one object; the second would "
                                        "silently replace the first")
            out[key] = value
        return out

    return json.loads(text, object_pairs_hook=unique)
