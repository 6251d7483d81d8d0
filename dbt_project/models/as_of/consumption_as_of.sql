-- Consumption logged on or before as_of_day.
select
    d.date_day as as_of_day,
    c.consumption_id,
    c.consumed_on,
    c.license_id,
    c.user_id,
    c.product_id,
    c.sessions,
    c.session_minutes,
    c.api_calls
from {{ ref('dim_date') }} as d
inner join {{ ref('fct_consumption') }} as c on c.consumed_on <= d.date_day
