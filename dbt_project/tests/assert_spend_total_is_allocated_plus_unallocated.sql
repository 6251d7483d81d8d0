-- On every day, total spend = allocated + unallocated, and allocated = the sum over cost centers.
{{ config(store_failures_as='view', meta={'dagster': {'ref': {'name': 'spend_by_cost_center_as_of'}}}) }}

with by_cost_center as (

    select
        as_of_day,
        sum(monthly_spend_usd) as by_cost_center_usd
    from {{ ref('spend_by_cost_center_as_of') }}
    group by as_of_day

)

select
    s.as_of_day,
    s.allocated_usd,
    s.unallocated_usd,
    s.total_usd,
    c.by_cost_center_usd
from {{ ref('spend_summary_as_of') }} as s
left join by_cost_center as c on c.as_of_day = s.as_of_day
where
    s.total_usd <> s.allocated_usd + s.unallocated_usd
    or s.allocated_usd <> coalesce(c.by_cost_center_usd, 0)
