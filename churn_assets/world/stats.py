"""`churnbench ledger stats`: a ledger's world in figures as of one day, read through the fold.

Counts follow the fold's query helpers, so they mean what gold means: an assigned license has an active
holder; unassigned licenses have no holder; a license still held by an offboarded user is neither and is
counted apart (a consistent ledger has none at the end of a day). Contract status comes from the term
dates at the day. Open tickets are those not resolved (status open or in_progress).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

from churn_assets.errors import UserFacingError
from churn_assets.world import fold
from churn_assets.world.calendar import require_in_calendar, typed_day
from churn_assets.world.ledger import LoadedLedger


class StatsError(UserFacingError, ValueError):
    """The day asked for is not a day of the ledger."""


@dataclass(frozen=True)
class LedgerStats:
    day: str
    first_day: str
    last_day: str
    format_version: int
    verified: bool
    events_total: int
    events_so_far: int
    users_existing: int
    users_active: int
    licenses_existing: int
    licenses_assigned: int
    licenses_unassigned: int
    licenses_held_by_inactive_users: int
    contracts_existing: int
    contracts_active: int
    contracts_expired: int
    contracts_pending: int
    tickets_open: int

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def ledger_stats(
    records: Sequence[dict[str, Any]],
    day: dt.date | str | None = None,
    *,
    format_version: int,
    verified: bool,
) -> LedgerStats:
    """Figures as of `day` (default: the ledger's last day). Refuses a day outside the ledger."""
    if not records:
        raise StatsError("the ledger has no events")
    first, last = records[0]["at"], records[-1]["at"]
    at = _day_in_ledger(day, first, last)
    state = fold.fold_ledger(records, at, format_version=format_version)
    contracts = fold.contracts_by_status(state, at)
    return LedgerStats(
        day=at.isoformat(),
        first_day=first,
        last_day=last,
        format_version=format_version,
        verified=verified,
        events_total=len(records),
        events_so_far=state.events_applied,
        users_existing=len(fold.existing_users(state, at)),
        users_active=len(fold.active_users(state, at)),
        licenses_existing=len(fold.existing_licenses(state, at)),
        licenses_assigned=len(fold.assigned_licenses(state, at)),
        licenses_unassigned=len(fold.unassigned_licenses(state, at)),
        licenses_held_by_inactive_users=len(fold.licenses_held_by_inactive_users(state, at)),
        contracts_existing=sum(len(ids) for ids in contracts.values()),
        contracts_active=len(contracts["active"]),
        contracts_expired=len(contracts["expired"]),
        contracts_pending=len(contracts["pending"]),
        tickets_open=len(fold.open_tickets(state, at)),
    )


def stats_of(loaded: LoadedLedger, day: dt.date | str | None = None) -> LedgerStats:
    return ledger_stats(loaded.records, day, format_version=loaded.format_version, verified=loaded.verified)


def _day_in_ledger(day: dt.date | str | None, first: str, last: str) -> dt.date:
    if day is None:
        return dt.date.fromisoformat(last)
    if isinstance(day, str):
        try:
            day = typed_day(day)
        except ValueError as e:
            raise StatsError(f"--at {e}") from None
    require_in_calendar("--at", day, dt.date.fromisoformat(first), dt.date.fromisoformat(last), "the ledger")
    return day


_LABELS = (
    ("events", "events_so_far", "events_total"),
    ("users existing", "users_existing", None),
    ("users active", "users_active", None),
    ("licenses", "licenses_existing", None),
    ("  assigned (active holder)", "licenses_assigned", None),
    ("  unassigned", "licenses_unassigned", None),
    ("  held by inactive users", "licenses_held_by_inactive_users", None),
    ("contracts", "contracts_existing", None),
    ("  active", "contracts_active", None),
    ("  expired", "contracts_expired", None),
    ("  pending (not yet effective)", "contracts_pending", None),
    ("tickets open", "tickets_open", None),
)


def format_stats(stats: LedgerStats) -> str:
    """The human-readable report (`--json` prints `to_dict()` instead)."""
    check = "verified" if stats.verified else "unverified"
    lines = [f"as of {stats.day} (ledger {stats.first_day} .. {stats.last_day}, "
             f"format {stats.format_version}, {check})"]
    values = stats.to_dict()
    for label, key, of_key in _LABELS:
        text = f"{values[key]:,}" + (f" of {values[of_key]:,}" if of_key else "")
        lines.append(f"  {label:<30} {text:>16}")
    return "\n".join(lines)
