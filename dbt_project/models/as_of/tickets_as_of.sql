-- Tickets opened on or before as_of_day with their status on that day; `is_open` = not resolved.
select
    as_of_day,
    ticket_id,
    user_id,
    product_id,
    priority,
    ticket_status,
    is_open,
    opened_on,
    valid_from as status_since
from {{ ref('tickets_history_as_of') }}
where valid_to is null
