select
    license_id,
    user_id,
    product_id,
    ended_by,
    valid_from,
    valid_to,
    source_seq
from {{ source('raw', 'assignments') }}
