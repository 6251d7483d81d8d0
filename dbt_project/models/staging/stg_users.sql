-- User status intervals: `active` from the hire, `offboarded` from the offboarding.
select
    user_id,
    status as user_status,
    offboard_reason,
    valid_from,
    valid_to,
    source_seq
from {{ source('raw', 'users') }}
