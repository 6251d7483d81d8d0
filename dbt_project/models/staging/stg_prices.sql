select
    product_id,
    list_price_usd,
    reason as price_change_reason,
    valid_from,
    valid_to,
    source_seq
from {{ source('raw', 'prices') }}
