-- Monthly license spend per cost center on as_of_day (docs/rules.md, "Spend"): the sum, over licenses
-- assigned on that day to active users whose cost center on that day is the cost center, of the
-- product's list price on that day. Cost centers without such a license have no row.
select
    l.as_of_day,
    l.spend_cost_center_id as cost_center_id,
    cc.business_unit,
    sum(l.list_price_usd) as monthly_spend_usd,
    count(*) as licenses
from {{ ref('licenses_as_of') }} as l
left join {{ ref('dim_cost_center') }} as cc on cc.cost_center_id = l.spend_cost_center_id
where l.is_allocated and l.list_price_usd is not null
group by l.as_of_day, l.spend_cost_center_id, cc.business_unit
