-- Support tickets, SCD2 over their status (class tickets): open -> in_progress -> resolved.
select
    md5(ticket_id || '|' || source_seq) as ticket_version_key,
    ticket_id,
    user_id,
    product_id,
    priority,
    ticket_status,
    ticket_status <> 'resolved' as is_open,
    opened_on,
    valid_from,
    valid_to,
    source_seq
from {{ ref('stg_tickets') }}
