"""Dagster table metadata from plain rows: the one way the wing shows a table in the UI's metadata panel (the
sweep run's cells, the regression's figures, what an evaluation read)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import dagster as dg


def _column_type(values: Sequence[Any]) -> str:
    """Dagster's column type of a column's values (the first one present decides; strings otherwise)."""
    found = next((v for v in values if v is not None), None)
    if isinstance(found, bool):
        return "bool"
    if isinstance(found, int):
        return "int"
    if isinstance(found, float):
        return "float"
    return "string"


def table_metadata(rows: Sequence[dict[str, Any]], columns: Sequence[str]) -> dg.TableMetadataValue:
    """A table for the UI's metadata panel, with its schema: `columns` of `rows`, each typed by its values
    (numbers stay numbers; anything else is shown as text, None as empty)."""
    types = {c: _column_type([r.get(c) for r in rows]) for c in columns}

    def value(v: Any, kind: str) -> Any:
        if v is None:
            return None
        return v if kind != "string" else str(v)

    records = [dg.TableRecord({c: value(r.get(c), types[c]) for c in columns}) for r in rows]
    return dg.MetadataValue.table(records, schema=dg.TableSchema(
        columns=[dg.TableColumn(c, types[c]) for c in columns]))
