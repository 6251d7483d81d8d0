-- Cost centers that exist on as_of_day, with their business unit.
select
    d.date_day as as_of_day,
    cc.cost_center_id,
    cc.cost_center_name,
    cc.business_unit,
    cc.created_on
from {{ ref('dim_date') }} as d
inner join {{ ref('dim_cost_center') }} as cc on {{ holds_on('cc', 'd.date_day') }}
