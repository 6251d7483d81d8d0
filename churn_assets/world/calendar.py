"""Calendar arithmetic shared by the simulator, the format-1 import, gold and the agents (dates only: no facts)."""

from __future__ import annotations

import calendar
import datetime as dt
import re

from churn_assets.errors import UserFacingError

# The one alias for a simulated calendar day, used by every layer (a day never carries a time).
Day = dt.date


def as_day(value: Day | str) -> Day:
    """A day given as a date or an ISO string (stored files and partition keys carry strings)."""
    return value if isinstance(value, dt.date) else dt.date.fromisoformat(value)


_DAY_FORM = re.compile(r"(\d{4})-(\d{2})-(\d{2})\Z")


def typed_day(text: str) -> Day:
    """A day typed as `YYYY-MM-DD`, or a `ValueError` whose message says what is wrong with it.

    `2024-02-30` has the form, so "not a day YYYY-MM-DD" would send the user looking for a typo that is not there:
    a text of the right form that names no day is called "not a calendar day", with the reason (the month's length,
    or no such month). Anything `date.fromisoformat` accepts is accepted, as before."""
    try:
        return dt.date.fromisoformat(text)
    except (ValueError, TypeError):
        pass
    form = _DAY_FORM.match(text) if isinstance(text, str) else None
    if form is None:
        raise ValueError(f"{text!r} is not a day YYYY-MM-DD")
    year, month, day = (int(g) for g in form.groups())
    if year == 0:
        reason = "there is no year 0000"
    elif not 1 <= month <= 12:
        reason = f"there is no month {month:02d}"
    elif day == 0:
        reason = "there is no day 00"
    else:
        reason = f"{calendar.month_name[month]} {year} has {calendar.monthrange(year, month)[1]} days"
    raise ValueError(f"{text!r} is not a calendar day ({reason})")


def add_months(day: dt.date, months: int) -> dt.date:
    """`day` plus whole months, clamped to the month's last day (2024-01-31 + 1 month = 2024-02-29)."""
    month0 = day.month - 1 + months
    year, month = day.year + month0 // 12, month0 % 12 + 1
    for d in (day.day, 30, 29, 28):
        try:
            return dt.date(year, month, d)
        except ValueError:
            continue
    raise AssertionError("unreachable: every month has 28 days")


def whole_months(start: dt.date, end: dt.date) -> int:
    """Whole months from `start` to `end`: the largest m with start + m months <= end (0 if end < start)."""
    if end < start:
        return 0
    m = (end.year - start.year) * 12 + (end.month - start.month)
    while m > 0 and add_months(start, m) > end:
        m -= 1
    return m


class OutsideCalendarError(UserFacingError):
    """A day the user gave (or a default derived from one) outside a world's or a ledger's calendar."""


def outside_calendar(what: str, day: dt.date, first: dt.date, last: dt.date, owner: str) -> OutsideCalendarError:
    """The one phrasing of an out-of-range day, everywhere (CLI commands and asset steps alike): `what` names
    the option or the day (`--at`, `T'`), `owner` the calendar (`world default-s42-3f9a1c`, `ledger x.jsonl`)."""
    return OutsideCalendarError(f"{what} = {day} is outside the calendar of {owner} ({first}..{last})")


def require_in_calendar(what: str, day: dt.date, first: dt.date, last: dt.date, owner: str) -> None:
    if not first <= day <= last:
        raise outside_calendar(what, day, first, last, owner)
