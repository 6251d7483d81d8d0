"""Staleness awareness (issue 33, item 5): does an agent say how old its data is?

An agent may state, with its answer, the as-of day of the data it used: the row field `data_as_of` (an ISO day,
or null / absent: not stated). Two shares per run:

- `share_equals_oldest`: of all answers, those whose stated day equals the oldest day observed in the answer's
  own trace (each read's `observed_day`: the day found in the data read, `grounding/traces.py`). An answer
  that joins a staged copy of day d with a live read of T is as old as d: the oldest read decides.
- `share_stale_revealed`: of the stale answers (freshness and mixed-vintage errors), those whose stated day
  is before T: a reader of the answer could tell it is not as of today.

An answer that states nothing counts as not matching and not revealing. When no answer of a run states a day
(the deterministic agent never does) both shares are None and `applicable` is False: "n/a", never 0%.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping, Sequence
from typing import Any

from churn_assets.evaluation.verdicts import STALE_VERDICTS

DATA_AS_OF = "data_as_of"  # the row field (written by the runner from the agent's answer)


def oldest_observed_day(row: Mapping[str, Any]) -> dt.date | None:
    """The oldest day observed by any read of the row's trace (a retrieval without reads: its `data_times`);
    None when the answer read nothing."""
    days: list[str] = []
    for entry in row.get("traces") or []:
        if not isinstance(entry, Mapping):
            continue
        reads = [r for r in entry.get("reads") or [] if isinstance(r, Mapping) and r.get("observed_day")]
        if reads:
            days += [str(r["observed_day"]) for r in reads]
        else:
            days += [str(d) for d in (entry.get("data_times") or {}).values()]
    parsed = [d for d in (_day(x) for x in days) if d is not None]
    return min(parsed) if parsed else None


def stated_day(row: Mapping[str, Any]) -> dt.date | None:
    """The row's stated as-of day (None: not stated, or not a day)."""
    value = row.get(DATA_AS_OF)
    return _day(value) if isinstance(value, str) else None


def _day(text: str) -> dt.date | None:
    try:
        return dt.date.fromisoformat(text)
    except ValueError:
        return None


def staleness_awareness(rows: Sequence[Mapping[str, Any]], t: dt.date | str) -> dict[str, Any]:
    """The two shares of the module doc over a run's rows at evaluation day `t`, with their counts."""
    t_day = dt.date.fromisoformat(t) if isinstance(t, str) else t
    stated = [r for r in rows if isinstance(r.get(DATA_AS_OF), str)]
    readable = [(r, stated_day(r)) for r in stated]
    equals = sum(1 for r, d in readable if d is not None and d == oldest_observed_day(r))
    stale = [r for r in rows if r.get("verdict") in STALE_VERDICTS]
    revealed = sum(1 for r in stale if (d := stated_day(r)) is not None and d < t_day)
    applicable = bool(stated)
    return {
        "answers": len(rows), "stated": len(stated),
        "stated_unreadable": sum(1 for _, d in readable if d is None),
        "stated_equals_oldest_observed": equals,
        "share_equals_oldest": round(equals / len(rows), 4) if applicable and rows else None,
        "stale_answers": len(stale), "stale_revealed": revealed,
        "share_stale_revealed": round(revealed / len(stale), 4) if applicable and stale else None,
        "applicable": applicable,
    }
