-- Every user hired on or before as_of_day, with status and cost center on that day.
select
    as_of_day,
    user_id,
    user_status,
    is_active,
    cost_center_id,
    hired_on,
    offboarded_on,
    valid_from as version_since
from {{ ref('users_history_as_of') }}
where valid_to is null
