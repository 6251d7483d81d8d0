"""The documents reader (store `documents`): the contract documents of the route's day on disk, parsed back
from their Markdown.

What a read observes: the day in the day folder's manifest, and the SHA-256 of every Markdown file read,
checked against the manifest's hash for it (a document edited or swapped after it was written fails with a
`DataIntegrityError`). The read's hash is the hash of the per-document hashes.
"""

from __future__ import annotations

import hashlib

from churn_assets.canonical import canonical_json, sha256_hex
from churn_assets.grounding.readers.base import Found, ReadContext
from churn_assets.grounding.routes import Route, RouterError
from churn_assets.grounding.rows import ContractRow, Request, Row, TermRow
from churn_assets.grounding.traces import DataIntegrityError
from contracts.parse import parse_contract_markdown
from contracts.store import DocumentStoreError, day_dir, read_day


def read(ctx: ReadContext, request: Request, route: Route) -> Found:
    root = ctx.sources.documents_root
    if root is None:
        raise RouterError("this router has no documents folder")
    folder = day_dir(root, route.day)
    try:
        stored = read_day(folder)
    except DocumentStoreError as e:
        raise RouterError(f"{e} (materialize contract_documents for {route.day})") from None
    ids = [request.contract] if request.contract is not None else stored.contract_ids
    rows: list[Row] = []
    hashes: list[str] = []
    for cid in ids:
        if cid not in stored.contract_ids:
            continue
        path = stored.markdown_path(cid)
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            raise DataIntegrityError(f"{path} is listed in its manifest but missing") from None
        digest = hashlib.sha256(data).hexdigest()
        if digest != stored.manifest.documents[cid].markdown_sha256:
            raise DataIntegrityError(f"{path}: its content hashes to {digest[:12]}, not to the manifest's "
                                     f"{stored.manifest.documents[cid].markdown_sha256[:12]}; rebuild the day")
        hashes.append(digest)
        facts = parse_contract_markdown(data.decode("utf-8"))
        rows.append(ContractRow(facts.contract_id, facts.vendor_id, facts.renewal_notice_days,
                                tuple(TermRow(t.recorded_on, t.effective_on, t.expires_on, t.annual_value_usd,
                                              t.committed_seats) for t in facts.terms)))
    return Found(rows, str(folder), len(ids), stored.manifest.day, sha256_hex(canonical_json(hashes)))
