-- Vendors, SCD2: a new version on every rename or tier change (class vendor_dims).
select
    md5(vendor_id || '|' || source_seq) as vendor_key,
    vendor_id,
    vendor_name,
    vendor_tier,
    vendor_change,
    valid_from,
    valid_to,
    source_seq
from {{ ref('stg_vendors') }}
