"""The paper's D+28 window (exposure only, tiered and off), computed once per world and kept in its folder.

The window's figures (`window.world_windows`: T' = D+28's, T over the `WINDOW_DAYS` days ending at T, the world's
default task set sampled at T and re-anchored to each day) are a function of the ledger's records, the registry,
the deployment's task count and seed, the window, the policies and the code, and of nothing a paper run changes.
Computing them folds the ledger once per arrival day (about 12 s of CPU on the default world, beside the cells'
two workers on a 2-core machine), so a warm paper, whose inputs are all built, would pay them again for the same
figures. They are kept at `<state>/worlds/<world>/windows/<key>.json` (removed with the world's folder), `key`
the SHA-256 of everything they depend on (`window_key`), and computed again when the file is missing, does not
parse, or names another key. Decision 305.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from churn_assets.canonical import canonical_json, sha256_hex
from churn_assets.evaluation.paper import WINDOW_DAYS, WINDOWS, T
from churn_assets.evaluation.results import code_version
from churn_assets.evaluation.window import Window, world_windows
from churn_assets.files import atomic_write_text
from churn_assets.grounding.registry import Registry, load_registry
from churn_assets.unique_keys import load_json
from churn_assets.world.ledger import load_ledger
from churn_assets.world.packed import records_key

WINDOWS_DIRNAME = "windows"
PAPER_POLICIES = ("tiered", "off")
PAPER_WINDOW = Window(WINDOWS["D+28"], WINDOW_DAYS, T)  # T' = D+28's, T over the WINDOW_DAYS days ending at T


def window_key(records: Any, format_version: int, registry: Registry, task_count: int, task_seed: int,
               window: Window, policies: tuple[str, ...], code: str) -> str:
    """SHA-256 of everything the window's figures are a function of."""
    parts = {"records": repr(records_key(records)), "format_version": format_version,
             "registry": registry.content_hash, "tasks": [task_count, task_seed],
             "window": [window.t_prime.isoformat(), window.days, window.t_end.isoformat()],
             "policies": list(policies), "code": code}
    return sha256_hex(canonical_json(parts))


def paper_window_figures(ledger_dir: Path, world_dir: Path, world_id: str, *, task_count: int,
                         task_seed: int) -> tuple[dict[str, Any], bool]:
    """(the window's figures as `churnbench paper --json` prints them, whether they were kept from before), for
    the world's task set drawn with `task_count` and `task_seed` (the deployment's)."""
    loaded = load_ledger(ledger_dir, packed=True)
    window = PAPER_WINDOW
    registry = load_registry()
    key = window_key(loaded.records, loaded.format_version, registry, task_count, task_seed, window,
                     PAPER_POLICIES, code_version())
    kept_file = world_dir / WINDOWS_DIRNAME / f"{key}.json"
    try:
        kept = load_json(kept_file.read_text(), str(kept_file))
        if kept.get("key") == key:
            return kept["figures"], True
    except (OSError, ValueError, AttributeError, KeyError):
        pass  # missing or unreadable: computed again below
    found = world_windows(loaded.records, world_id, window, PAPER_POLICIES, registry, task_count=task_count,
                          task_seed=task_seed, format_version=loaded.format_version)
    figures = {"t_prime": window.t_prime.isoformat(), "first": window.first.isoformat(), "t": T.isoformat(),
               "days": WINDOW_DAYS, "policies": {w.policy: w.exposure.to_json() for w in found}}
    atomic_write_text(kept_file, json.dumps({"key": key, "figures": figures}, indent=1, sort_keys=True) + "\n")
    return figures, False
