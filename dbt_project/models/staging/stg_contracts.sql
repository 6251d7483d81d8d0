-- Contract ids only: vendor, term, dates, value and seats live in the contract documents
-- (docs/rules.md, "Contract documents").
select
    contract_id,
    valid_from,
    valid_to,
    source_seq
from {{ source('raw', 'contracts') }}
