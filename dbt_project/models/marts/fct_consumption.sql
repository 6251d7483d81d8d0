-- Consumption, one row per logged event (class consumption): sessions, minutes and API calls of a
-- user on a license. Facts never change: valid_from is the day they happened.
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
from {{ ref('stg_consumption') }}
