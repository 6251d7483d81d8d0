-- Licenses held on as_of_day and by whom. `holder_active` applies docs/rules.md, "Absent references": a license held
-- by an offboarded (or unknown) user is not an active user's license; `holder_cost_center_id` is the holder's cost
-- center on that day.
select
    a.as_of_day,
    a.license_id,
    a.product_id,
    a.user_id,
    a.valid_from as assigned_on,
    coalesce(u.is_active, false) as holder_active,
    u.cost_center_id as holder_cost_center_id
from {{ ref('assignments_history_as_of') }} as a
left join {{ ref('users_as_of') }} as u on u.as_of_day = a.as_of_day and u.user_id = a.user_id
where a.valid_to is null
