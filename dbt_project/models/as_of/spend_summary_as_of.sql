-- Monthly license spend on as_of_day: allocated (to cost centers, as spend_by_cost_center_as_of),
-- unallocated (unassigned licenses, licenses of inactive users or of users without a cost center), and
-- their total. Licenses whose product has no price that day are counted apart and in no amount.
select
    as_of_day,
    coalesce(sum(list_price_usd) filter (where is_allocated), 0) as allocated_usd,
    coalesce(sum(list_price_usd) filter (where not is_allocated), 0) as unallocated_usd,
    coalesce(sum(list_price_usd), 0) as total_usd,
    count(*) filter (where list_price_usd is not null) as priced_licenses,
    count(*) filter (where list_price_usd is null) as unpriced_licenses
from {{ ref('licenses_as_of') }}
group by as_of_day
