"""Parity of a stored day with the ledger: the facts parsed back from the Markdown on disk must equal the
fold as of the day, and every file must still match its manifest hash.

The documents are the only store of contract terms (docs/rules.md, "Contract documents"), so nothing downstream
can notice a wrong or edited document by comparing with another store: this check is where it is caught.
Every problem names the contract and the day.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from dataclasses import dataclass

from contracts.facts import ContractFacts
from contracts.parse import ContractParseError, parse_contract_markdown
from contracts.store import DocumentStoreError, StoredDay


@dataclass(frozen=True)
class ParityProblem:
    day: dt.date
    contract_id: str | None  # None for a problem of the day folder as a whole
    message: str

    def __str__(self) -> str:
        subject = f"contract {self.contract_id}" if self.contract_id else "documents"
        return f"{subject} on {self.day.isoformat()}: {self.message}"


def check_parity(stored: StoredDay, expected: Sequence[ContractFacts], day: dt.date) -> list[ParityProblem]:
    """Every way `stored` differs from `expected` (the fold's facts as of `day`); empty when in parity."""
    problems: list[ParityProblem] = []

    def problem(contract_id: str | None, message: str) -> None:
        problems.append(ParityProblem(day, contract_id, message))

    if stored.manifest.day != day:
        problem(None, f"the manifest is for {stored.manifest.day.isoformat()}")
    listed = set(stored.manifest.documents)
    wanted = {f.contract_id for f in expected}
    for cid in sorted(wanted - listed):
        problem(cid, "no document (the ledger has the contract by this day)")
    for cid in sorted(listed - wanted):
        problem(cid, "a document for a contract the ledger does not have by this day")
    for facts in expected:
        cid = facts.contract_id
        if cid not in listed:
            continue
        try:
            parsed = parse_contract_markdown(stored.markdown(cid))
        except (ContractParseError, DocumentStoreError, UnicodeDecodeError) as e:
            problem(cid, f"the Markdown cannot be read back: {e}")
            continue
        for name in parsed.diff(facts):
            problem(cid, f"the Markdown states {name} = {getattr(parsed, name)!r}, the ledger "
                         f"{getattr(facts, name)!r}")
    for message in stored.verify():
        cid, sep, rest = message.partition(": ")
        if sep and cid in listed:
            problem(cid, rest)
        else:
            problem(None, message)
    return problems
