-- Product list prices (monthly, per seat), SCD2 (class prices).
select
    md5(product_id || '|' || source_seq) as price_key,
    product_id,
    list_price_usd,
    price_change_reason,
    valid_from,
    valid_to,
    source_seq
from {{ ref('stg_prices') }}
