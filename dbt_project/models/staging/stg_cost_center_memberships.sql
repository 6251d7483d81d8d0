select
    user_id,
    cost_center_id,
    valid_from,
    valid_to,
    source_seq
from {{ source('raw', 'cost_center_memberships') }}
