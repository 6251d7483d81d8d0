-- History of ticket statuses as seen on each day: every version that started on or before as_of_day; an end
-- after as_of_day is not known yet and reads as NULL (open). Query with `where as_of_day = 'YYYY-MM-DD'`.
select
    d.date_day as as_of_day,
    h.ticket_id,
    h.user_id,
    h.product_id,
    h.priority,
    h.ticket_status,
    h.is_open,
    h.opened_on,
    h.valid_from,
    {{ as_seen_on('h.valid_to', 'd.date_day') }} as valid_to
from {{ ref('dim_date') }} as d
inner join {{ ref('fct_ticket') }} as h on {{ known_by('h', 'd.date_day') }}
