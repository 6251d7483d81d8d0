-- Spend per cost center (spend_by_cost_center_as_of) equals the sum of its licenses' list prices,
-- recomputed here straight from the marts on every day: licenses held that day by a user active that
-- day whose cost center that day is the cost center, at the product's list price that day.
{{ config(store_failures_as='view', meta={'dagster': {'ref': {'name': 'spend_by_cost_center_as_of'}}}) }}

with expected as (

    select
        d.date_day as as_of_day,
        u.cost_center_id,
        sum(pr.list_price_usd) as monthly_spend_usd,
        count(*) as licenses
    from {{ ref('dim_date') }} as d
    inner join {{ ref('fct_license_assignment') }} as a on {{ holds_on('a', 'd.date_day') }}
    inner join {{ ref('fct_license_purchase') }} as l
        on l.license_id = a.license_id and l.purchased_on <= d.date_day
    inner join {{ ref('dim_user') }} as u
        on u.user_id = a.user_id and {{ holds_on('u', 'd.date_day') }}
    inner join {{ ref('fct_price') }} as pr
        on pr.product_id = l.product_id and {{ holds_on('pr', 'd.date_day') }}
    where u.is_active and u.cost_center_id is not null
    group by d.date_day, u.cost_center_id

),

actual as (

    select
        as_of_day,
        cost_center_id,
        monthly_spend_usd,
        licenses
    from {{ ref('spend_by_cost_center_as_of') }}

)

select
    coalesce(e.as_of_day, a.as_of_day) as as_of_day,
    coalesce(e.cost_center_id, a.cost_center_id) as cost_center_id,
    e.monthly_spend_usd as expected_usd,
    a.monthly_spend_usd as actual_usd,
    e.licenses as expected_licenses,
    a.licenses as actual_licenses
from expected as e
full outer join actual as a
    on a.as_of_day = e.as_of_day and a.cost_center_id = e.cost_center_id
where
    e.monthly_spend_usd is distinct from a.monthly_spend_usd
    or e.licenses is distinct from a.licenses
