-- History of license holders as seen on each day: every version that started on or before as_of_day; an end
-- after as_of_day is not known yet and reads as NULL (open). Query with `where as_of_day = 'YYYY-MM-DD'`.
select
    d.date_day as as_of_day,
    h.license_id,
    h.user_id,
    h.product_id,
    case when h.valid_to <= d.date_day then h.ended_by end as ended_by,
    h.valid_from,
    {{ as_seen_on('h.valid_to', 'd.date_day') }} as valid_to
from {{ ref('dim_date') }} as d
inner join {{ ref('fct_license_assignment') }} as h on {{ known_by('h', 'd.date_day') }}
