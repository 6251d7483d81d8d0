"""The documents reader (store `documents`): the contract documents of the route's day on disk, parsed
back from their Markdown."""

from __future__ import annotations

from churn_assets.grounding.readers.base import Found, ReadContext
from churn_assets.grounding.routes import Route, RouterError
from churn_assets.grounding.rows import ContractRow, Request, Row, TermRow


def read(ctx: ReadContext, request: Request, route: Route) -> Found:
    from contracts.parse import parse_contract_markdown
    from contracts.store import DocumentStoreError, day_dir, read_day

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
    for cid in ids:
        if cid not in stored.contract_ids:
            continue
        facts = parse_contract_markdown(stored.markdown(cid))
        rows.append(ContractRow(facts.contract_id, facts.vendor_id, facts.renewal_notice_days,
                                tuple(TermRow(t.recorded_on, t.effective_on, t.expires_on, t.annual_value_usd,
                                              t.committed_seats) for t in facts.terms)))
    return Found(rows, str(folder), len(ids))
