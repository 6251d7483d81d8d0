-- History of users (status and cost center, dim_user versions) as seen on each day: every version that
-- started on or before as_of_day; later dates read as NULL. Query with `where as_of_day = 'YYYY-MM-DD'`.
select
    d.date_day as as_of_day,
    h.user_id,
    h.user_status,
    h.is_active,
    h.cost_center_id,
    h.hired_on,
    {{ as_seen_on('h.offboarded_on', 'd.date_day') }} as offboarded_on,
    h.valid_from,
    {{ as_seen_on('h.valid_to', 'd.date_day') }} as valid_to
from {{ ref('dim_date') }} as d
inner join {{ ref('dim_user') }} as h on {{ known_by('h', 'd.date_day') }}
