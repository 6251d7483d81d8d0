"""Test helper: a hand-made format-2 ledger as records, every payload checked against its kind's schema.

`make_ledger(("2024-01-01", "user_hired", "usr_0", {...}), ...)` numbers the records in order and fills in each
kind's entity type; there is no hash chain (the fold, gold and the projections do not read it).
"""

from __future__ import annotations

from typing import Any

from churn_assets.world.events import EVENT_KINDS, payload_error


def make_ledger(*events: tuple[str, str, str, dict[str, Any]]) -> list[dict[str, Any]]:
    records = []
    for seq, (at, kind, entity_id, payload) in enumerate(events):
        spec = EVENT_KINDS[kind]
        assert payload_error(spec, payload) is None, (kind, payload_error(spec, payload))
        records.append({"seq": seq, "at": at, "kind": kind, "entity_type": spec.entity_type,
                        "entity_id": entity_id, "payload": payload})
    return records
