-- Users active on as_of_day (hired on or before it, not offboarded on or before it), with their cost
-- center and business unit on that day.
select
    u.as_of_day,
    u.user_id,
    u.cost_center_id,
    cc.business_unit,
    u.hired_on
from {{ ref('users_as_of') }} as u
left join {{ ref('dim_cost_center') }} as cc
    on cc.cost_center_id = u.cost_center_id and {{ known_by('cc', 'u.as_of_day') }}
where u.is_active
