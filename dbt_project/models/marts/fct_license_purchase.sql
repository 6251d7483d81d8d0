-- License purchases (one seat each): product, vendor, contract id and purchase price. The purchase
-- price is recorded, never used for spend (docs/rules.md, "Spend": spend follows the current list price).
select
    l.license_id,
    l.product_id,
    p.vendor_id,
    l.contract_id,
    l.unit_price_usd,
    l.purchased_on,
    l.valid_from,
    l.valid_to,
    l.source_seq
from {{ ref('stg_licenses') }} as l
left join {{ ref('stg_products') }} as p on p.product_id = l.product_id
