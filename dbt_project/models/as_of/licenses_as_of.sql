-- Every license purchased on or before as_of_day: product, contract id, holder, the list price on that
-- day, and where its monthly spend goes under the single definition of docs/rules.md, "Spend": to the holder's cost
-- center when the license is assigned to an active user with a cost center on that day
-- (`spend_cost_center_id`), else to unallocated spend. A license whose product has no price that day
-- has a NULL price and counts in no spend.
select
    d.date_day as as_of_day,
    l.license_id,
    l.product_id,
    l.vendor_id,
    l.contract_id,
    l.purchased_on,
    l.unit_price_usd,
    a.user_id as holder_user_id,
    coalesce(a.holder_active, false) as holder_active,
    a.holder_cost_center_id,
    pr.list_price_usd,
    case when a.holder_active then a.holder_cost_center_id end as spend_cost_center_id,
    coalesce(a.holder_active and a.holder_cost_center_id is not null, false) as is_allocated
from {{ ref('dim_date') }} as d
inner join {{ ref('fct_license_purchase') }} as l on l.purchased_on <= d.date_day
left join {{ ref('assignments_as_of') }} as a on a.as_of_day = d.date_day and a.license_id = l.license_id
left join {{ ref('fct_price') }} as pr on pr.product_id = l.product_id and {{ holds_on('pr', 'd.date_day') }}
