select
    world_id,
    calendar_start,
    calendar_end,
    dates_through,
    head_hash,
    event_count
from {{ source('raw', 'world') }}
