select
    vendor_id,
    vendor_name,
    vendor_tier,
    change as vendor_change,
    valid_from,
    valid_to,
    source_seq
from {{ source('raw', 'vendors') }}
