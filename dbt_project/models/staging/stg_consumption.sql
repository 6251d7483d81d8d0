select
    consumption_id,
    consumed_on,
    license_id,
    user_id,
    product_id,
    sessions,
    session_minutes,
    api_calls,
    valid_from,
    valid_to
from {{ source('raw', 'consumption') }}
