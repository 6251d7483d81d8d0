"""Build one world's documents for one day: fold, render, write atomically, compare with the day before.

This is the whole of a `contract_documents` partition without Dagster; the asset module only finds the
ledger and the folder and turns the result into metadata.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from contracts.facts import ContractFacts, contract_facts_as_of, document_records
from contracts.render import render_contract, render_markdown
from contracts.store import DayChanges, DayManifest, compare_hashes, day_dir, write_day


@dataclass(frozen=True)
class BuiltDay:
    path: Path
    manifest: DayManifest
    facts: list[ContractFacts]
    changes: DayChanges  # against the day before (by Markdown hash; see `changes_since_previous_day`)
    seconds: dict[str, float] = field(default_factory=dict)  # fold, render, write

    @property
    def status_counts(self) -> dict[str, int]:
        counts = {"pending": 0, "active": 0, "expired": 0}
        for f in self.facts:
            counts[f.status] = counts.get(f.status, 0) + 1
        return counts


def changes_since_previous_day(records: Sequence[Mapping[str, Any]], day: dt.date, current: Sequence[ContractFacts],
                               *, format_version: int = 2) -> DayChanges:
    """Which documents differ from the day before's, by content hash.

    The day before is re-rendered in memory (Markdown only, a few milliseconds) rather than read from
    disk, so the answer does not depend on which partitions happen to be materialized. Comparing the
    Markdown is exact: a PDF is laid out from its Markdown and nothing else.
    """
    previous = contract_facts_as_of(records, day - dt.timedelta(days=1), format_version=format_version)
    return compare_hashes(_markdown_hashes(previous), _markdown_hashes(current))


def _markdown_hashes(facts: Sequence[ContractFacts]) -> dict[str, str]:
    return {f.contract_id: hashlib.sha256(render_markdown(f).encode("utf-8")).hexdigest() for f in facts}


def build_day(records: Sequence[Mapping[str, Any]], world_id: str, day: dt.date, contracts_root: Path,
              *, format_version: int = 2) -> BuiltDay:
    """Render every contract of `world_id` as of `day` into `<contracts_root>/<day>/` (atomically)."""
    seconds: dict[str, float] = {}
    started = time.perf_counter()
    relevant = document_records(records, format_version=format_version)
    facts = contract_facts_as_of(relevant, day, format_version=format_version)
    changes = changes_since_previous_day(relevant, day, facts, format_version=format_version)
    seconds["fold"] = time.perf_counter() - started

    started = time.perf_counter()
    rendered = [render_contract(f) for f in facts]
    seconds["render"] = time.perf_counter() - started

    started = time.perf_counter()
    target = day_dir(contracts_root, day)
    manifest = write_day(target, world_id, day, rendered)
    seconds["write"] = time.perf_counter() - started
    return BuiltDay(target, manifest, facts, changes, seconds)
