select
    license_id,
    product_id,
    contract_id,
    unit_price_usd,
    purchased_on,
    valid_from,
    valid_to,
    source_seq
from {{ source('raw', 'licenses') }}
