-- Products listed on or before as_of_day, with their vendor (name and tier on that day), license model
-- and the list price valid on that day (monthly, per seat).
select
    d.date_day as as_of_day,
    p.product_id,
    p.product_name,
    p.vendor_id,
    v.vendor_name,
    v.vendor_tier,
    p.license_model,
    p.api_access,
    p.listed_on,
    pr.list_price_usd,
    pr.valid_from as price_since
from {{ ref('dim_date') }} as d
inner join {{ ref('dim_product') }} as p on {{ holds_on('p', 'd.date_day') }}
left join {{ ref('dim_vendor') }} as v on v.vendor_id = p.vendor_id and {{ holds_on('v', 'd.date_day') }}
left join {{ ref('fct_price') }} as pr on pr.product_id = p.product_id and {{ holds_on('pr', 'd.date_day') }}
