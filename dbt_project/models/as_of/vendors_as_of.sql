-- Vendors as of as_of_day: the name and tier valid on that day.
select
    as_of_day,
    vendor_id,
    vendor_name,
    vendor_tier,
    valid_from as version_since
from {{ ref('vendors_history_as_of') }}
where valid_to is null
