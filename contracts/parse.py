"""Parse contract facts back from a rendered Markdown document.

The parity check uses it (facts read back from the documents on disk must equal the fold as of the day),
and so do readers that only have the documents (agents answer contract questions from them). It reads
the document's tables (the contract summary, Schedule A and Schedule B) and its status line; the clauses
repeat those facts in prose for human readers and are not parsed.

`parse_contract_markdown` is strict: it refuses a document whose summary disagrees with its own term
history. `parse_summary` is lenient: the label -> value rows of whatever summary table a text (for
example one retrieved chunk) contains.
"""

from __future__ import annotations

import datetime as dt
import re

from churn_assets.errors import UserFacingError
from contracts.model import ContractFacts, ProductRef, TermFacts

NOT_STATED = "not stated"  # a fact the ledger does not carry (format-1 ledgers)
NO_EXPIRY = "none"  # "Expiry recorded on" before the ledger records one

SUMMARY_HEADING = "## Contract summary"
SUMMARY_HEADER = ("Field", "Value")
PRODUCTS_HEADING = "## Schedule A: Products"
HISTORY_HEADING = "## Schedule B: Term history"
STATUS_PREFIX = "**Status:** "
_STATUS_WORDS = {"Active.": "active", "Expired.": "expired", "Pending.": "pending"}
_HISTORY_COLUMNS = 8


class ContractParseError(UserFacingError, ValueError):
    """The text is not a contract document this module can read; the message says what is wrong."""


# ---------------------------------------------------------------------------------------------------
# Table cells (the renderer escapes with `escape_cell`, this module splits with `split_row`)
# ---------------------------------------------------------------------------------------------------


def escape_cell(value: object) -> str:
    """A table cell: backslashes and pipes escaped, on one line."""
    text = NOT_STATED if value is None else str(value)
    return " ".join(text.replace("\\", "\\\\").replace("|", "\\|").split())


def split_row(line: str) -> list[str]:
    """The cells of a Markdown table row, unescaped and stripped."""
    body = line.strip()
    if not (body.startswith("|") and body.endswith("|") and len(body) >= 2):
        raise ContractParseError(f"not a table row: {line!r}")
    cells, current, i = [], [], 1
    while i < len(body) - 1:
        ch = body[i]
        if ch == "\\" and i + 1 < len(body) - 1:
            current.append(body[i + 1])
            i += 2
            continue
        if ch == "|":
            cells.append("".join(current).strip())
            current = []
        else:
            current.append(ch)
        i += 1
    cells.append("".join(current).strip())
    return cells


def is_separator_row(line: str) -> bool:
    return bool(re.fullmatch(r"\|(\s*:?-{3,}:?\s*\|)+", line.strip()))


def _section(text: str, heading: str) -> list[str] | None:
    """The lines under `heading` up to the next heading, or None when the heading is absent."""
    lines = text.splitlines()
    try:
        start = lines.index(heading)
    except ValueError:
        return None
    out = []
    for line in lines[start + 1:]:
        if line.startswith("#"):
            break
        out.append(line)
    return out


def _table(lines: list[str]) -> list[list[str]]:
    """The body rows of the first table in `lines` (header and separator rows dropped)."""
    rows = [ln for ln in lines if ln.strip().startswith("|")]
    if len(rows) < 2 or not is_separator_row(rows[1]):
        return []
    return [split_row(ln) for ln in rows[2:]]


# ---------------------------------------------------------------------------------------------------
# Values
# ---------------------------------------------------------------------------------------------------


def _optional(value: str) -> str | None:
    return None if value == NOT_STATED else value


def _day(value: str, what: str) -> dt.date:
    try:
        return dt.date.fromisoformat(value)
    except ValueError:
        raise ContractParseError(f"{what}: {value!r} is not a day (YYYY-MM-DD)") from None


def _optional_day(value: str, what: str) -> dt.date | None:
    return None if value in (NOT_STATED, NO_EXPIRY) else _day(value, what)


def _int(value: str, what: str, suffix: str = "") -> int | None:
    if value == NOT_STATED:
        return None
    if suffix and value.endswith(suffix):
        value = value[: -len(suffix)]
    try:
        return int(value)
    except ValueError:
        raise ContractParseError(f"{what}: {value!r} is not a whole number") from None


def _money(value: str, what: str) -> float | None:
    if value == NOT_STATED:
        return None
    number = value.removeprefix("USD ").replace(",", "")
    if not re.fullmatch(r"-?\d+(\.\d{1,2})?", number):
        raise ContractParseError(f"{what}: {value!r} is not an amount")
    return float(number)


def _yes_no(value: str, what: str) -> bool | None:
    if value == NOT_STATED:
        return None
    if value in ("Yes", "No"):
        return value == "Yes"
    raise ContractParseError(f"{what}: {value!r} is not Yes or No")


# ---------------------------------------------------------------------------------------------------
# Documents
# ---------------------------------------------------------------------------------------------------


def parse_summary(text: str) -> dict[str, str]:
    """Label -> value of the contract summary rows in `text` ({} when it has none). Lenient: `text` may be
    a whole document or a retrieved chunk that holds only part of the table."""
    lines = _section(text, SUMMARY_HEADING) or text.splitlines()
    out: dict[str, str] = {}
    for line in lines:
        if not line.strip().startswith("|") or is_separator_row(line):
            continue
        try:
            row = split_row(line)
        except ContractParseError:
            continue
        if len(row) == 2 and row != list(SUMMARY_HEADER):
            out[row[0]] = row[1]
    return out


def parse_status(text: str) -> str:
    """The informative status ("active", "expired" or "pending") stated by the document."""
    for line in text.splitlines():
        if line.startswith(STATUS_PREFIX):
            word = line[len(STATUS_PREFIX):].split(" ", 1)[0]
            if word in _STATUS_WORDS:
                return _STATUS_WORDS[word]
            raise ContractParseError(f"status line: unknown status {word!r}")
    raise ContractParseError("no status line")


def _summary_of(text: str) -> dict[str, str]:
    lines = _section(text, SUMMARY_HEADING)
    if lines is None:
        raise ContractParseError(f"no {SUMMARY_HEADING!r} section")
    rows = _table(lines)
    if not rows or any(len(r) != 2 for r in rows):
        raise ContractParseError("the contract summary is not a two-column table")
    summary = {r[0]: r[1] for r in rows}
    if len(summary) != len(rows):
        raise ContractParseError("the contract summary repeats a row")
    return summary


def _products_of(text: str) -> tuple[ProductRef, ...]:
    lines = _section(text, PRODUCTS_HEADING)
    if lines is None:
        raise ContractParseError(f"no {PRODUCTS_HEADING!r} section")
    rows = _table(lines)
    if any(len(r) != 2 for r in rows):
        raise ContractParseError("Schedule A is not a two-column table")
    return tuple(ProductRef(r[0], _optional(r[1])) for r in rows)


def _terms_of(text: str) -> tuple[TermFacts, ...]:
    lines = _section(text, HISTORY_HEADING)
    if lines is None:
        raise ContractParseError(f"no {HISTORY_HEADING!r} section")
    terms = []
    for n, row in enumerate(_table(lines), start=1):
        if len(row) != _HISTORY_COLUMNS:
            raise ContractParseError(f"Schedule B row {n} has {len(row)} columns, not {_HISTORY_COLUMNS}")
        where = f"Schedule B row {n}"
        if row[0] != str(n):
            raise ContractParseError(f"{where} is numbered {row[0]!r}")
        change = row[1].lower()
        if change not in ("signed", "renewed"):
            raise ContractParseError(f"{where}: event {row[1]!r} is neither Signed nor Renewed")
        months = _int(row[5], f"{where} term")
        if months is None:
            raise ContractParseError(f"{where}: the term in months is not stated")
        terms.append(TermFacts(
            change=change,
            recorded_on=_day(row[2], f"{where} recorded on"),
            term_months=months,
            effective_on=_day(row[3], f"{where} effective on"),
            expires_on=_day(row[4], f"{where} expires on"),
            annual_value_usd=_money(row[6], f"{where} annual value"),
            committed_seats=_int(row[7], f"{where} committed seats"),
        ))
    if not terms:
        raise ContractParseError("Schedule B lists no term")
    return tuple(terms)


def _field(summary: dict[str, str], label: str) -> str:
    try:
        return summary[label]
    except KeyError:
        raise ContractParseError(f"the contract summary has no {label!r} row") from None


def parse_contract_markdown(text: str) -> ContractFacts:
    """The facts a rendered contract document states. Raises `ContractParseError` saying what is wrong,
    including a summary that disagrees with the document's own term history."""
    summary = _summary_of(text)
    terms = _terms_of(text)
    current = terms[-1]
    # The summary restates the current term; a document whose two statements differ is not trustworthy.
    restated = {
        "Effective on": current.effective_on.isoformat(),
        "Expires on": current.expires_on.isoformat(),
        "Term": f"{current.term_months} months",
        "Annual value": NOT_STATED if current.annual_value_usd is None else f"USD {current.annual_value_usd:,.2f}",
        "Committed seats": NOT_STATED if current.committed_seats is None else str(current.committed_seats),
        "Renewals": str(len(terms) - 1),
    }
    for label, expected in restated.items():
        stated = _field(summary, label)
        if stated != expected:
            raise ContractParseError(f"the contract summary says {label} {stated!r} but Schedule B says "
                                     f"{expected!r}")
    notice = _int(_field(summary, "Renewal notice"), "Renewal notice", suffix=" days")
    return ContractFacts(
        contract_id=_field(summary, "Contract ID"),
        vendor_id=_optional(_field(summary, "Vendor ID")),
        vendor_name=_optional(_field(summary, "Vendor")),
        vendor_tier=_optional(_field(summary, "Vendor tier")),
        products=_products_of(text),
        signed_on=_day(_field(summary, "Signed on"), "Signed on"),
        auto_renew=_yes_no(_field(summary, "Auto-renewal"), "Auto-renewal"),
        renewal_notice_days=notice,
        terms=terms,
        expired_on=_optional_day(_field(summary, "Expiry recorded on"), "Expiry recorded on"),
        status=parse_status(text),
    )
