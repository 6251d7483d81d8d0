select
    ticket_id,
    user_id,
    product_id,
    priority,
    status as ticket_status,
    opened_on,
    valid_from,
    valid_to,
    source_seq
from {{ source('raw', 'tickets') }}
