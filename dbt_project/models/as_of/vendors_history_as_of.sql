-- History of vendor names and tiers as seen on each day: every version that started on or before as_of_day; an end
-- after as_of_day is not known yet and reads as NULL (open). Query with `where as_of_day = 'YYYY-MM-DD'`.
select
    d.date_day as as_of_day,
    h.vendor_id,
    h.vendor_name,
    h.vendor_tier,
    h.vendor_change,
    h.valid_from,
    {{ as_seen_on('h.valid_to', 'd.date_day') }} as valid_to
from {{ ref('dim_date') }} as d
inner join {{ ref('dim_vendor') }} as h on {{ known_by('h', 'd.date_day') }}
